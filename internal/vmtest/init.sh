#!/usr/bin/busybox sh
# The guest's init (PID 1), written into the initramfs by vmtest.
#
# Stage 1 copies the initramfs into a tmpfs and switches to it: a process
# cannot pivot_root out of the initial rootfs, and sandbox runtimes do.
# Stage 2 mounts the pseudo filesystems and cgroup2 alone, loads the kernel
# modules, builds the host's cgroup shape (init in init.scope, the command in
# a nested cgroup that another process also holds), runs the setup script,
# runs the command with a time limit, reports on the console and reboots
# (qemu runs with -no-reboot, so that ends the VM).
#
# Everything the host reads is a line on the console that names the run's
# nonce:
#   AIRLOCK-VM-BEGIN <nonce>          the command starts; its output follows
#   AIRLOCK-VM-EXIT <nonce> <status>  it ended with this status
#   AIRLOCK-VM-TIMEOUT <nonce>        it ran past its limit and was killed
#   AIRLOCK-VM-ERROR <nonce> <why>    the guest could not run it

if [ ! -e /.vmtest-stage2 ]; then
	echo "vmtest: init: copying the initramfs to tmpfs"
	/usr/bin/busybox mkdir -p /newroot
	/usr/bin/busybox mount -t tmpfs -o mode=0755 vmroot /newroot
	for f in /*; do
		case "$f" in
		/newroot | /proc | /sys | /dev) ;;
		*) /usr/bin/busybox cp -a "$f" /newroot/ ;;
		esac
	done
	/usr/bin/busybox mkdir -p /newroot/proc /newroot/sys /newroot/dev
	/usr/bin/busybox touch /newroot/.vmtest-stage2
	exec /usr/bin/busybox switch_root /newroot /init
fi

echo "vmtest: init: mounting"
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root TMPDIR=/tmp USER=root LOGNAME=root
. /vmtest/env

fail() {
	echo "AIRLOCK-VM-ERROR $VMTEST_NONCE $*"
	sync
	reboot -f
	sleep 60
}

mount -t proc proc /proc || fail "mount proc"
mount -t sysfs sysfs /sys || fail "mount sysfs"
mount -t devtmpfs devtmpfs /dev || fail "mount devtmpfs"
mkdir -p /dev/pts /dev/shm
mount -t devpts -o gid=5,mode=0620,ptmxmode=0666 devpts /dev/pts || fail "mount devpts"
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /dev/shm || fail "mount /dev/shm"
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /tmp || fail "mount /tmp"
mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs /run || fail "mount /run"
# cgroup2 alone, mounted as systemd mounts it.
mount -t cgroup2 -o "nosuid,nodev,noexec,$VMTEST_CGROUP_OPTS" cgroup2 /sys/fs/cgroup ||
	fail "mount cgroup2 -o $VMTEST_CGROUP_OPTS"
if grep -q '^cgroup ' /proc/mounts; then
	fail "a cgroup v1 hierarchy is mounted"
fi
hostname vmtest
ip link set lo up || fail "loopback up"
if [ -w /proc/sys/kernel/unprivileged_userns_clone ]; then
	echo 1 >/proc/sys/kernel/unprivileged_userns_clone
fi
for m in /lib/modules/vmtest/*.ko; do
	[ -e "$m" ] || continue
	insmod "$m" || fail "insmod $m"
done

echo "vmtest: init: building the cgroup shape"
# The host's cgroup shape: init in init.scope, each ancestor of the command's
# cgroup giving its children the controllers asked for.
cg=/sys/fs/cgroup
avail=" $(cat $cg/cgroup.controllers) "
enable=""
for c in $VMTEST_CONTROLLERS; do
	case "$avail" in *" $c "*) enable="$enable +$c" ;; esac
done
mkdir -p $cg/init.scope
echo 1 >$cg/init.scope/cgroup.procs || fail "move init to init.scope"
dir=$cg
rest=$VMTEST_CGROUP
while [ -n "$rest" ]; do
	if [ -n "$enable" ]; then
		echo "$enable" >"$dir/cgroup.subtree_control" || fail "enable$enable in $dir"
	fi
	comp=${rest%%/*}
	if [ "$comp" = "$rest" ]; then rest=""; else rest=${rest#*/}; fi
	dir=$dir/$comp
	mkdir -p "$dir" || fail "mkdir $dir"
done
leaf=$dir
if [ "$VMTEST_KEEPER" = 1 ]; then
	sh -c 'echo $$ >"$1/cgroup.procs" && exec sleep 2000000000' keeper "$leaf" </dev/null >/dev/null 2>&1 &
fi
export VMTEST_LEAF=$leaf

if [ -e /vmtest/setup ]; then
	sh /vmtest/setup </dev/null >/dev/console 2>&1 || fail "setup exited $?"
fi

rm -f /run/vmtest-timeout
echo "AIRLOCK-VM-BEGIN $VMTEST_NONCE"
sh -c 'echo $$ >"$1/cgroup.procs" && exec sh /vmtest/command' command "$leaf" </dev/null >/dev/console 2>&1 &
cmd=$!
(
	sleep "$VMTEST_TIMEOUT"
	: >/run/vmtest-timeout
	kill -KILL "$cmd"
) </dev/null >/dev/null 2>&1 &
watch=$!
wait "$cmd" 2>/dev/null
status=$?
kill "$watch" 2>/dev/null
echo
if [ -e /run/vmtest-timeout ]; then
	echo "AIRLOCK-VM-TIMEOUT $VMTEST_NONCE"
else
	echo "AIRLOCK-VM-EXIT $VMTEST_NONCE $status"
fi
sync
reboot -f
sleep 60
