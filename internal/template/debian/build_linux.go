package debian

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Limits of one run.
const (
	// maxLineBytes caps one forwarded output line; longer lines are cut.
	maxLineBytes = 4096
	// drainWait bounds the wait for the output pipe after mmdebstrap exits
	// (a leftover process could hold it open).
	drainWait = 5 * time.Second
)

// termGrace is how long mmdebstrap gets to clean up after SIGTERM before
// the whole process group is killed. A variable for tests.
var termGrace = 20 * time.Second

// Build creates the Debian root filesystem o describes at o.Target. It
// needs root (mmdebstrap runs in --mode=root, chrooting into the tree)
// and the mmdebstrap program, and uses the network to reach the mirrors.
//
// Errors wrap errdefs classes: ErrInvalidArgument for bad options,
// ErrAlreadyExists if Target exists, ErrPermissionDenied when not root,
// ErrFailedPrecondition when mmdebstrap is missing, ErrTimeout and
// ErrCanceled when the run is cut short, ErrUnavailable when mmdebstrap
// fails (for example an unknown package or an unreachable mirror; the
// message carries mmdebstrap's last error line). On any error nothing is
// left at Target and the temporary tree is removed.
func Build(ctx context.Context, o Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	if o.Target == "" {
		return fmt.Errorf("debian: no target directory: %w", errdefs.ErrInvalidArgument)
	}
	o = o.withDefaults()
	progress := o.Progress
	if progress == nil {
		progress = func(string) {}
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("debian: building a root filesystem needs root: %w", errdefs.ErrPermissionDenied)
	}
	bin := o.Binary
	if bin == "" {
		p, err := exec.LookPath("mmdebstrap")
		if err != nil {
			return fmt.Errorf("debian: mmdebstrap is not installed (apt-get install mmdebstrap): %w", errdefs.ErrFailedPrecondition)
		}
		bin = p
	}
	if _, err := os.Lstat(o.Target); err == nil {
		return fmt.Errorf("debian: target exists: %w", errdefs.ErrAlreadyExists)
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("debian: target: %w", stripPath(err))
	}
	tmp, err := os.MkdirTemp(filepath.Dir(o.Target), ".debian-build-")
	if err != nil {
		return fmt.Errorf("debian: creating build directory: %w", stripPath(err))
	}
	done := false
	defer func() {
		if !done {
			_ = removeTree(tmp)
		}
	}()
	rootfs := filepath.Join(tmp, "rootfs")
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		return fmt.Errorf("debian: creating build directory: %w", stripPath(err))
	}

	start := time.Now()
	progress(fmt.Sprintf("debian: building %s, variant %s, %d extra packages", o.Suite, o.Variant, len(o.Packages)))
	runCtx, cancel := context.WithTimeout(ctx, o.Timeout)
	err = run(runCtx, bin, Args(o, rootfs), rootfs, progress)
	timedOut := errors.Is(runCtx.Err(), context.DeadlineExceeded)
	cancel()
	if err != nil {
		switch {
		case errors.Is(ctx.Err(), context.DeadlineExceeded):
			return fmt.Errorf("debian: build ran out of time: %w", errdefs.ErrTimeout)
		case ctx.Err() != nil:
			return fmt.Errorf("debian: build canceled: %w", errdefs.ErrCanceled)
		case timedOut:
			return fmt.Errorf("debian: build did not finish within %s: %w", o.Timeout, errdefs.ErrTimeout)
		}
		return err
	}
	st, err := finish(ctx, rootfs)
	if err != nil {
		return err
	}
	if err := renameNoReplace(rootfs, o.Target); err != nil {
		if errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOTEMPTY) {
			return fmt.Errorf("debian: target exists: %w", errdefs.ErrAlreadyExists)
		}
		return fmt.Errorf("debian: moving the result into place: %w", stripPath(err))
	}
	done = true
	_ = os.Remove(tmp)
	progress(fmt.Sprintf("debian: done in %s: %d files, %d MiB", time.Since(start).Round(time.Second), st.entries, st.bytes>>20))
	return nil
}

// renameNoReplace renames from to to, failing with EEXIST if to exists
// (a plain rename would silently replace an empty directory).
func renameNoReplace(from, to string) error {
	err := unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		// The file system cannot do it atomically: check, then rename.
		if _, lerr := os.Lstat(to); lerr == nil {
			return unix.EEXIST
		}
		return os.Rename(from, to)
	}
	return err
}

// buildEnv is mmdebstrap's whole environment: nothing of the daemon's
// leaks into the build except proxy settings apt needs to reach mirrors.
func buildEnv() []string {
	env := []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"LC_ALL=C.UTF-8",
		"HOME=/root",
		"DEBIAN_FRONTEND=noninteractive",
	}
	for _, k := range []string{"http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// run executes mmdebstrap and forwards its output lines to progress. It
// runs in its own process group (so cancellation reaches the chroot's
// processes too) and its own mount namespace with private propagation (so
// the proc, sys and dev mounts it makes inside the tree vanish with it,
// even if it is killed before it can unmount them).
func run(ctx context.Context, bin string, args []string, rootfs string, progress func(string)) error {
	pr, pw, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("debian: %w", stripPath(err))
	}
	defer pr.Close()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = buildEnv()
	cmd.Dir = "/"
	cmd.Stdout = pw
	cmd.Stderr = pw
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:      true,
		Unshareflags: syscall.CLONE_NEWNS,
		Pdeathsig:    syscall.SIGKILL,
	}
	cmd.Cancel = func() error {
		// mmdebstrap traps SIGTERM and cleans up; the group gets it so the
		// chroot's processes stop too.
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	}
	cmd.WaitDelay = termGrace
	if err := cmd.Start(); err != nil {
		pw.Close()
		return fmt.Errorf("debian: starting mmdebstrap: %w", errdefs.ErrFailedPrecondition)
	}
	pw.Close()
	lastErr := make(chan string, 1)
	go func() {
		lastErr <- forwardLines(pr, rootfs, progress)
	}()
	waitErr := cmd.Wait()
	// Whatever is left of the group (a daemon a maintainer script
	// started, or everything after WaitDelay) is killed.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	var last string
	select {
	case last = <-lastErr:
	case <-time.After(drainWait):
		pr.Close()
		last = <-lastErr
	}
	if waitErr != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		class := errdefs.ErrUnavailable
		switch {
		case last == "":
			last = "no error message"
		case strings.Contains(last, "Unable to locate package"), strings.Contains(last, "has no installation candidate"):
			class = errdefs.ErrInvalidArgument
		}
		return fmt.Errorf("debian: mmdebstrap failed (%s): %s: %w", exitText(waitErr), last, class)
	}
	return nil
}

// exitText describes how a command ended without naming host paths.
func exitText(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ProcessState.String()
	}
	return "did not run"
}

// forwardLines reads r until EOF or error, sends each non-empty line to
// progress with the build directory's path replaced by "<rootfs>" and
// control characters removed, and returns the last line that looks like
// an error ("E: ..." or "Error: ...").
func forwardLines(r io.Reader, rootfs string, progress func(string)) string {
	br := bufio.NewReaderSize(r, maxLineBytes)
	var last string
	for {
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 {
			line := string(chunk)
			if err == bufio.ErrBufferFull {
				// Skip the rest of an overlong line.
				for err == bufio.ErrBufferFull {
					_, err = br.ReadSlice('\n')
				}
				line += "..."
			}
			for _, part := range strings.Split(line, "\r") {
				part = cleanLine(part, rootfs)
				if part == "" {
					continue
				}
				if strings.HasPrefix(part, "E: ") || strings.HasPrefix(part, "Error: ") {
					last = part
				}
				progress(part)
			}
		}
		if err != nil {
			return last
		}
	}
}

// cleanLine trims line, hides the host path of the build directory and
// drops control characters.
func cleanLine(line, rootfs string) string {
	line = strings.ReplaceAll(line, rootfs, "<rootfs>")
	line = strings.ReplaceAll(line, filepath.Dir(rootfs), "<build>")
	line = strings.Map(func(r rune) rune {
		if r == '\t' {
			return ' '
		}
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, line)
	return strings.TrimSpace(line)
}
