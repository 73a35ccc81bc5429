package build

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/internal/account"
	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/template/airfile"
)

// LabelBuild is the sandbox label that marks a build sandbox; its value
// is the template being built.
const LabelBuild = "airlock.build"

// Output handling of RUN steps.
const (
	// maxLogLine caps one log event; longer lines are cut.
	maxLogLine = 4096
	// tailLines is how many output lines a RunError keeps.
	tailLines = 15
	// destroyTimeout bounds the destruction of a build sandbox.
	destroyTimeout = 30 * time.Second
)

// runtimeDir is where the runtime mounts the agent binary in every
// sandbox; it is not part of the sandbox's changes.
const runtimeDir = ".airlock"

// RunError is a RUN step that did not succeed. It wraps
// errdefs.ErrFailedPrecondition (a non-zero exit, a signal, a command
// that could not start), ErrTimeout or ErrResourceExhausted.
type RunError struct {
	// Line is the Airfile line of the step.
	Line int
	// Status is how the command ended (agentclient.Status values).
	Status string
	// ExitCode is the command's exit code (-1 when killed by a signal).
	ExitCode int
	// Reason says what happened, in a few words.
	Reason string
	// Output holds the last lines of the command's output.
	Output []string

	class error
}

// Error implements error.
func (e *RunError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "airfile line %d: RUN %s", e.Line, e.Reason)
	if len(e.Output) > 0 {
		b.WriteString("; last output:")
		for _, l := range e.Output {
			b.WriteString("\n  ")
			b.WriteString(l)
		}
	}
	return b.String()
}

// Unwrap returns the error class.
func (e *RunError) Unwrap() error { return e.class }

// newSandboxID returns a fresh id for a build sandbox.
func newSandboxID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "build-" + hex.EncodeToString(b[:])
}

// runUser is the account RUN steps run as: the current USER, looked up
// in the image by the runtime, or root for an image without one (as in
// Docker; a sandbox's own default is "user").
func (j *job) runUser() string {
	if j.cfg.User == "" {
		return account.Root.Name
	}
	return j.cfg.User
}

// runStep runs a RUN step in a sandbox over the layers so far and
// returns the layer of its changes.
func (j *job) runStep(ctx context.Context, n int, s airfile.Step) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, j.b.cfg.StepTimeout)
	defer cancel()
	where := fmt.Sprintf("airfile line %d: RUN", s.Line)
	dirs, err := j.layerDirs()
	if err != nil {
		return "", fmt.Errorf("%s: %w", where, err)
	}
	id := newSandboxID()
	inst, err := j.b.cfg.Runtime.Create(ctx, runtime.Spec{
		ID:       id,
		Rootfs:   runtime.Rootfs{Layers: dirs, Workdir: j.cfg.Workdir, User: j.runUser()},
		Limits:   j.b.cfg.Limits,
		Build:    true,
		Env:      j.cfg.EnvMap(),
		Hostname: "build",
		Labels:   map[string]string{LabelBuild: j.storeName()},
	})
	if err != nil {
		if ctx.Err() != nil {
			return "", ctxErr(ctx, where)
		}
		j.b.log.Warn("template build: creating the build sandbox", "template", j.storeName(), "err", err)
		return "", fmt.Errorf("%s: starting the build sandbox: %w", where, publicErr(err))
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), destroyTimeout)
		defer cancel()
		if err := inst.Destroy(dctx); err != nil {
			j.b.log.Warn("template build: destroying the build sandbox", "sandbox", id, "err", err)
		}
	}()
	client := agentclient.New(inst.Dial)
	defer client.Close()

	out := &output{em: j.em, step: n}
	res, err := client.Exec(ctx, agentclient.ExecRequest{
		Argv:    s.Argv(),
		Cwd:     j.workdir(),
		Timeout: j.b.cfg.StepTimeout,
		Stdout:  out.writer(),
		Stderr:  out.writer(),
	})
	out.flush()
	if err != nil {
		if ctx.Err() != nil {
			return "", ctxErr(ctx, where)
		}
		return "", fmt.Errorf("%s: %w", where, publicErr(err))
	}
	if res.Status != agentclient.StatusSuccess {
		return "", out.failure(s.Line, res, j.b.cfg.StepTimeout)
	}
	layer, err := j.extractStream(ctx, j.extractOptions(), func(ctx context.Context, w io.Writer) error {
		return exportChanges(ctx, client, w)
	})
	if err != nil {
		if ctx.Err() != nil {
			return "", ctxErr(ctx, where)
		}
		return "", fmt.Errorf("%s: saving the changes: %w", where, err)
	}
	return layer, nil
}

// publicErr reduces internal and unavailable errors, which may carry host
// details, to their class, unless they carry a message written for the
// caller (errdefs.Public).
func publicErr(err error) error {
	switch class := errdefs.Class(err); class {
	case errdefs.ErrInternal, errdefs.ErrUnavailable:
		if msg, ok := errdefs.PublicMessage(err); ok {
			return errdefs.Publicf(class, "%s", msg)
		}
		return class
	}
	return err
}

// exportChanges writes the sandbox's changes to w as a layer tar, without
// the runtime's own mount points.
func exportChanges(ctx context.Context, c *agentclient.Client, w io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	var (
		wg        sync.WaitGroup
		exportErr error
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		exportErr = c.ExportChanges(ctx, pw)
		pw.CloseWithError(exportErr)
	}()
	err := filterChanges(pr, w)
	if err == nil {
		// The tar is complete; what follows must be the end of the
		// stream, whose error (if any) is the export's.
		var n int64
		if n, err = io.Copy(io.Discard, io.LimitReader(pr, 1<<20)); err == nil && n == 1<<20 {
			err = fmt.Errorf("the sandbox's changes have data after the end of the tar: %w", errdefs.ErrInvalidArgument)
		}
	}
	if err != nil {
		pr.CloseWithError(errExtractStopped)
		cancel()
	}
	wg.Wait()
	if exportErr != nil && !errors.Is(err, errExtractStopped) {
		return fmt.Errorf("exporting the changes: %w", publicErr(exportErr))
	}
	return err
}

// filterChanges copies the tar stream r to w, leaving out the runtime's
// directory (/.airlock, the agent binary's mount point). The stream
// comes from a sandbox: a malformed one is an error, and the extraction
// that reads w checks every entry again.
func filterChanges(r io.Reader, w io.Writer) error {
	tr := tar.NewReader(r)
	tw := tar.NewWriter(w)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if errdefs.Class(err) != errdefs.ErrInternal {
				return err
			}
			return fmt.Errorf("the sandbox's changes are not a valid tar: %v: %w", err, errdefs.ErrInvalidArgument)
		}
		if isRuntimePath(hdr.Name) {
			continue
		}
		if isSparse(hdr) {
			// The agent never writes sparse entries; their holes would
			// expand past every size limit.
			return fmt.Errorf("the sandbox's changes hold a sparse file entry: %w", errdefs.ErrInvalidArgument)
		}
		if err := tw.WriteHeader(hdr); err != nil {
			if errdefs.Class(err) != errdefs.ErrInternal {
				return err
			}
			return fmt.Errorf("the sandbox's changes hold a bad entry: %v: %w", err, errdefs.ErrInvalidArgument)
		}
		if _, err := io.Copy(tw, tr); err != nil {
			if errdefs.Class(err) != errdefs.ErrInternal {
				return err
			}
			return fmt.Errorf("the sandbox's changes are not a valid tar: %v: %w", err, errdefs.ErrInvalidArgument)
		}
	}
	return tw.Close()
}

// isSparse reports a GNU sparse entry, in the old or the PAX form.
func isSparse(hdr *tar.Header) bool {
	if hdr.Typeflag == tar.TypeGNUSparse {
		return true
	}
	for k := range hdr.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}

// isRuntimePath reports whether a tar entry name is the runtime's
// directory, something in it, or its whiteout.
func isRuntimePath(name string) bool {
	c := strings.TrimPrefix(path.Clean("/"+name), "/")
	return c == runtimeDir || strings.HasPrefix(c, runtimeDir+"/") || c == ".wh."+runtimeDir
}

// output turns a RUN step's output into log events and keeps its last
// lines for the error message.
type output struct {
	em   *emitter
	step int

	mu      sync.Mutex
	writers []*lineWriter
	tail    []string
	offline bool // a line suggests the command wanted the network
}

// writer returns a new writer for one output stream.
func (o *output) writer() io.Writer {
	w := &lineWriter{o: o}
	o.mu.Lock()
	o.writers = append(o.writers, w)
	o.mu.Unlock()
	return w
}

// line records and emits one line.
func (o *output) line(b []byte) {
	s := cleanLine(b)
	if s == "" {
		return
	}
	o.mu.Lock()
	o.tail = append(o.tail, s)
	if len(o.tail) > tailLines {
		o.tail = o.tail[len(o.tail)-tailLines:]
	}
	if !o.offline && looksOffline(s) {
		o.offline = true
	}
	o.mu.Unlock()
	o.em.emit(Event{Type: EventLog, Step: o.step, Text: s})
}

// flush emits the unterminated last line of each stream.
func (o *output) flush() {
	o.mu.Lock()
	ws := o.writers
	o.mu.Unlock()
	for _, w := range ws {
		w.mu.Lock()
		if len(w.buf) > 0 {
			o.line(w.buf)
		}
		w.buf, w.over = w.buf[:0], false
		w.mu.Unlock()
	}
}

// failure describes a RUN that did not succeed.
func (o *output) failure(line int, res *agentclient.ExecResult, timeout time.Duration) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	e := &RunError{Line: line, Status: string(res.Status), ExitCode: res.ExitCode, Output: append([]string(nil), o.tail...), class: errdefs.ErrFailedPrecondition}
	switch res.Status {
	case agentclient.StatusTimeout:
		e.Reason, e.class = fmt.Sprintf("did not finish within %s", timeout), errdefs.ErrTimeout
	case agentclient.StatusResourceExceeded:
		e.Reason, e.class = "exceeded the build sandbox's memory, disk or process limit", errdefs.ErrResourceExhausted
	case agentclient.StatusKilled:
		e.Reason = fmt.Sprintf("was killed by signal %d", res.Signal)
	default:
		e.Reason = fmt.Sprintf("failed with exit code %d", res.ExitCode)
		if res.Error != "" {
			e.Reason = fmt.Sprintf("could not start (exit code %d): %s", res.ExitCode, clip(res.Error, 200))
		}
	}
	if o.offline {
		e.Reason += " (build steps run without network access)"
	}
	return e
}

// lineWriter splits one stream into lines at \n and \r; a line longer
// than maxLogLine is cut there.
type lineWriter struct {
	o    *output
	mu   sync.Mutex
	buf  []byte
	over bool // the current line was cut
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexAny(p, "\n\r")
		seg := p
		if i >= 0 {
			seg = p[:i]
		}
		if !w.over {
			if room := maxLogLine - len(w.buf); len(seg) > room {
				w.buf = append(append(w.buf, seg[:room]...), "..."...)
				w.over = true
			} else {
				w.buf = append(w.buf, seg...)
			}
		}
		if i < 0 {
			break
		}
		w.o.line(w.buf)
		w.buf, w.over = w.buf[:0], false
		p = p[i+1:]
	}
	return n, nil
}

// cleanLine makes one output line printable: valid UTF-8, tabs as spaces,
// no other control characters, no trailing blanks.
func cleanLine(b []byte) string {
	s := strings.ToValidUTF8(string(b), string(utf8.RuneError))
	s = strings.Map(func(r rune) rune {
		switch {
		case r == '\t':
			return ' '
		case r < 0x20 || r == 0x7f:
			return -1
		}
		return r
	}, s)
	return strings.TrimRight(s, " ")
}

// looksOffline reports output of a command that failed to reach the
// network.
func looksOffline(s string) bool {
	for _, m := range []string{
		"Temporary failure resolving", "Temporary failure in name resolution", "Could not resolve",
		"Name or service not known", "Network is unreachable", "Failed to establish a new connection",
		"getaddrinfo", "Could not connect to",
	} {
		if strings.Contains(s, m) {
			return true
		}
	}
	return false
}
