package linux

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// The sandbox's egress socket: <state dir>/egress/proxy.sock, and its
// tools socket beside it (tools_linux.go). The directory is the sandbox
// root's (its host uid base), 0700, and holds nothing else; the agent holds it on a detached bind mount, so ".."
// from its descriptor stays in the directory, and no sandboxed process
// can name it (the agent is non-dumpable: /proc/1/fd is out of reach).
const (
	egressDirName  = "egress"
	egressSockName = "proxy.sock"
)

var _ runtime.Egress = (*Instance)(nil)

// egressDir creates the egress directory in the sandbox's state dir,
// owned by uid, and returns a descriptor of it on a detached bind mount
// (open_tree OPEN_TREE_CLONE) for the agent to inherit.
func egressDir(stateDir string, uid int) (*os.File, error) {
	dir := filepath.Join(stateDir, egressDirName)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	if err := os.Chown(dir, uid, uid); err != nil {
		return nil, err
	}
	dirfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dirfd)
	tree, err := unix.OpenTree(dirfd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return nil, fmt.Errorf("detached mount: %w", err)
	}
	defer unix.Close(tree)
	fd, err := unix.Openat(tree, ".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), "egress"), nil
}

// ListenEgress implements runtime.Egress: it binds the sandbox's egress
// socket, 0600 and owned by the sandbox's root (the agent's host uid),
// replacing any stale one. Closing the listener removes the socket.
func (i *Instance) ListenEgress() (net.Listener, error) {
	return i.listenAgentSocket("egress", egressSockName)
}

// listenAgentSocket binds the socket name in the sandbox's egress
// directory, which its agent holds (see egressDir), 0600 and owned by
// the sandbox's root (the agent's host uid), replacing any stale one;
// what says what it is for in errors. Closing the listener removes the
// socket.
func (i *Instance) listenAgentSocket(what, name string) (net.Listener, error) {
	select {
	case <-i.destroyed:
		return nil, fmt.Errorf("sandbox %s is destroyed: %w", i.id, errdefs.ErrFailedPrecondition)
	default:
	}
	dir := filepath.Join(i.dir, egressDirName)
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		// A build sandbox, or one an older daemon created.
		return nil, fmt.Errorf("sandbox %s has no %s bridge: %w", i.id, what, errdefs.ErrNotSupported)
	}
	path := filepath.Join(dir, name)
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("sandbox %s: %s socket: %w", i.id, what, err)
	}
	// Bound through a descriptor of the directory: the state dir's path
	// may be longer than a socket address holds (108 bytes).
	dirfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %s socket: %w", i.id, what, err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: "/proc/self/fd/" + strconv.Itoa(dirfd) + "/" + name, Net: "unix"})
	unix.Close(dirfd)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %s socket: %w", i.id, what, err)
	}
	ln.SetUnlinkOnClose(false)
	uid := int(i.state.UIDBase)
	if err := errors.Join(os.Chmod(path, 0o600), os.Chown(path, uid, uid)); err != nil {
		ln.Close()
		_ = os.Remove(path)
		return nil, fmt.Errorf("sandbox %s: %s socket: %w", i.id, what, err)
	}
	return &egressListener{UnixListener: ln, path: path}, nil
}

// egressListener removes its socket when closed.
type egressListener struct {
	*net.UnixListener
	path string
	once sync.Once
}

func (l *egressListener) Close() error {
	err := l.UnixListener.Close()
	l.once.Do(func() { _ = os.Remove(l.path) })
	return err
}

// dnsBridgeAddrs are where the agent serves the sandbox's DNS (UDP and
// TCP): where every resolver in the sandbox asks, its resolv.conf being
// empty (glibc, musl and Go read that as 127.0.0.1; Go also asks ::1).
// The first is required; the others are served where the sandbox's
// loopback has them (::1 needs IPv6 in the kernel).
var dnsBridgeAddrs = []string{"127.0.0.1:53", "[::1]:53"}

// startEgressBridge starts the agent's egress bridge when the daemon gave
// the sandbox an egress directory: runtime.EgressBridgeAddr, on the
// sandbox's loopback, forwarded to the socket in that directory, the
// tools bridge (startToolsBridge), and the
// DNS bridge on dnsBridgeAddrs, which sends each query to the same
// socket (the proxy's DNS endpoint). The agent is root in the sandbox's
// user namespace, which owns its network namespace, so it may bind port
// 53 there. Called by the serve stage, after confinement.
func startEgressBridge(cfg *initConfig, log *slog.Logger) error {
	if cfg.EgressFD <= 0 {
		return nil
	}
	unix.CloseOnExec(cfg.EgressFD)
	if err := startToolsBridge(cfg, log); err != nil {
		return fmt.Errorf("tools bridge: %w", err)
	}
	path := "/proc/self/fd/" + strconv.Itoa(cfg.EgressFD) + "/" + egressSockName
	dial := func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}
	ln, err := net.Listen("tcp", runtime.EgressBridgeAddr)
	if err != nil {
		return err
	}
	type dnsSockets struct {
		udp net.PacketConn
		tcp net.Listener
	}
	var dns []dnsSockets
	for i, addr := range dnsBridgeAddrs {
		udp, tcp, err := listenDNS(addr)
		if err != nil {
			if i == 0 {
				ln.Close()
				for _, s := range dns {
					s.udp.Close()
					s.tcp.Close()
				}
				return fmt.Errorf("dns bridge: %w", err)
			}
			log.Info("dns bridge: not serving", "addr", addr, "err", err)
			continue
		}
		dns = append(dns, dnsSockets{udp, tcp})
	}
	go func() {
		if err := agent.ServeEgressBridge(context.Background(), ln, dial); err != nil {
			log.Warn("egress bridge stopped", "err", err)
		}
	}()
	for _, s := range dns {
		go func() {
			if err := agent.ServeDNSBridge(context.Background(), s.udp, s.tcp, dial); err != nil {
				log.Warn("dns bridge stopped", "addr", s.tcp.Addr().String(), "err", err)
			}
		}()
	}
	return nil
}

// listenDNS binds UDP and TCP on addr.
func listenDNS(addr string) (net.PacketConn, net.Listener, error) {
	udp, err := net.ListenPacket("udp", addr)
	if err != nil {
		return nil, nil, err
	}
	tcp, err := net.Listen("tcp", addr)
	if err != nil {
		udp.Close()
		return nil, nil, err
	}
	return udp, tcp, nil
}
