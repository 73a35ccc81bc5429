// Package vmtest boots a Linux guest under qemu to run tests on a kernel and
// cgroup shape the machine running them does not have: a cgroup v2-only
// host, Debian's stock kernels (Bookworm's 6.1, the newest backports), the
// daemon started inside an init's per-service cgroup that other processes
// share.
//
// A guest is qemu's pc machine with TCG (no KVM needed), a Debian kernel
// package fetched with apt into a cache (FetchKernel, CacheDir), and an
// initramfs built on the fly: a static busybox, the kernel modules asked for
// (overlay by default), a small init and the test's payload (static
// binaries, e.g. a package's test binary from GoTest). The command's output
// and exit status come back over the serial console.
//
// In a test:
//
//	vm := vmtest.Require(t, vmtest.Bookworm) // skips without qemu/kernel unless AIRLOCK_VM_REQUIRED=1
//	bin := vmtest.GoTest(t, "github.com/airlock-sandbox/airlock/internal/cgroups")
//	res, err := vm.Run(ctx, vmtest.Guest{
//		Files:   []vmtest.File{{Guest: "/opt/cgroups.test", Host: bin}},
//		Command: []string{"/opt/cgroups.test", "-test.v"},
//	})
//	// res.ExitCode, res.Output, res.Boot, res.Run
//
// Only Linux hosts are supported.
package vmtest
