package interp

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// agentOutputBudget is what the agent forwards of one output stream over
// a process's whole life (its default cap). A kernel that has sent nearly
// that much is retired after its cell: past the cap the agent drops
// output, frames included.
const (
	agentOutputBudget = 64 << 20
	budgetMargin      = 8 << 20
)

// Bounds of the daemon's calls to the agent on behalf of a kernel.
const (
	signalTimeout  = 5 * time.Second
	keepaliveEvery = 2 * time.Second
	maxTail        = 2048 // raw output kept from outside cells, for errors
)

// Cell IDs count up from the daemon's start time in microseconds, so a
// restarted daemon never reuses an ID an adopted kernel may still report
// (and they stay below 2^53, exact in JavaScript).
var (
	cellIDBase = uint64(time.Now().UnixMicro())
	cellSeq    atomic.Uint64
)

func nextCellID() uint64 { return cellIDBase + cellSeq.Add(1) }

// kernel is one driver process serving a context.
type kernel struct {
	m         *Manager
	sandboxID string
	// proc is the driver's process handle, set once Start or Connect
	// returned it (the stream may deliver output before).
	proc   atomic.Pointer[agentclient.Process]
	cancel context.CancelFunc // ends the output stream (not the process)

	ready     chan struct{}
	readyOnce sync.Once
	exited    chan struct{}
	exitRes   *agentclient.ExecResult // set before exited closes

	chans    [2]*channel
	received atomic.Int64

	mu   sync.Mutex
	cell *cell
	tail []byte // recent raw output outside cells
}

// channel is one of the kernel's output streams (0 stdout, 1 stderr).
type channel struct {
	k     *kernel
	idx   int
	sp    *splitter
	carry utf8Carry
}

func (ch *channel) Write(p []byte) (int, error) {
	ch.k.received.Add(int64(len(p)))
	n, err := ch.sp.Write(p)
	if err != nil {
		ch.k.m.log.Warn("code kernel protocol failure; killing it", "sandbox", ch.k.sandboxID, "err", err)
		go ch.k.kill()
	}
	return n, err
}

func newNonce() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// newKernel returns a kernel for c and the context of its output stream
// (ended by k.cancel).
func newKernel(c *codeContext, nonce string) (*kernel, context.Context) {
	m := c.b.m
	sctx, cancel := context.WithCancel(context.Background())
	k := &kernel{
		m: m, sandboxID: c.b.id, cancel: cancel,
		ready: make(chan struct{}), exited: make(chan struct{}),
	}
	for i := range k.chans {
		ch := &channel{k: k, idx: i}
		ch.sp = newSplitter(nonce, m.lim.maxFrame(),
			func(b []byte) { k.onRaw(ch, b) },
			func(b []byte) { k.onFrame(ch.idx, b) })
		k.chans[i] = ch
	}
	return k, sctx
}

// start starts a kernel for c and returns once it serves. Call with c's
// slot held.
func (c *codeContext) start(ctx context.Context) (*kernel, error) {
	m := c.b.m
	// The sandbox manager merges the sandbox's Env under env.
	env := make(map[string]string, len(c.env)+3)
	maps.Copy(env, c.env)
	// The nonce goes to the driver as the first line of its stdin, never
	// in its environment: /proc/PID/environ keeps the environment the
	// process started with whatever the driver removes, and children
	// inherit what it does not.
	nonce := newNonce()
	env["AIRLOCK_INTERP_MAX_OUTPUT"] = strconv.Itoa(m.lim.MaxOutputBytes)
	env["AIRLOCK_INTERP_MAX_TEXT"] = strconv.Itoa(m.lim.MaxTextBytes)
	env["AIRLOCK_INTERP_MAX_IMAGE"] = strconv.Itoa(m.lim.MaxImageBytes)
	c.mu.Lock()
	c.gen++
	tag := kernelTag(c, c.gen, nonce)
	c.mu.Unlock()

	k, sctx := newKernel(c, nonce)
	// Until the kernel serves, the caller's ctx bounds the start.
	stop := context.AfterFunc(ctx, k.cancel)
	defer stop()
	p, err := m.sb.StartBackground(sctx, c.b.id, agentclient.ExecRequest{
		Argv:        drivers[c.lang].argv,
		Cwd:         c.cwd,
		Env:         env,
		Tag:         tag,
		OpenStdin:   true,
		OutputLimit: agentOutputBudget,
		Stdout:      k.chans[0],
		Stderr:      k.chans[1],
	})
	if err != nil {
		k.cancel()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("start %s context: %w", c.lang, ctxErr(ctx))
		}
		return nil, err
	}
	if p.PID == 0 {
		k.cancel()
		res, _ := p.Wait()
		return nil, startFailure(c.lang, res)
	}
	k.proc.Store(p)
	k.watch(c, p)
	sendCtx, cancelSend := context.WithTimeout(sctx, m.lim.StartTimeout)
	err = k.send(sendCtx, []byte(nonce+"\n"))
	cancelSend()
	if err != nil && !k.isExited() { // an exit is explained below
		k.kill()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("start %s context: %w", c.lang, ctxErr(ctx))
		}
		return nil, fmt.Errorf("start %s context: send the nonce: %w", c.lang, err)
	}
	timer := time.NewTimer(m.lim.StartTimeout)
	defer timer.Stop()
	select {
	case <-k.ready:
		if !stop() {
			k.kill()
			return nil, fmt.Errorf("start %s context: %w", c.lang, ctxErr(ctx))
		}
	case <-k.exited:
		return nil, fmt.Errorf("the %s context exited as it started%s: %w", c.lang, k.tailNote(), errdefs.ErrFailedPrecondition)
	case <-timer.C:
		k.kill()
		return nil, fmt.Errorf("the %s context did not start within %v: %w", c.lang, m.lim.StartTimeout, errdefs.ErrTimeout)
	case <-ctx.Done():
		k.kill()
		return nil, fmt.Errorf("start %s context: %w", c.lang, ctxErr(ctx))
	}
	c.mu.Lock()
	c.k, c.dead = k, ""
	c.mu.Unlock()
	return k, nil
}

// startFailure explains a driver that could not be executed.
func startFailure(lang Language, res *agentclient.ExecResult) error {
	if res != nil && res.ExitCode == 127 {
		return fmt.Errorf("%s contexts need %s, which this sandbox does not have: %w",
			lang, interpreterName(lang), errdefs.ErrFailedPrecondition)
	}
	msg := "unknown reason"
	if res != nil && res.Error != "" {
		msg = res.Error
	}
	return fmt.Errorf("the %s context could not start: %s: %w", lang, msg, errdefs.ErrFailedPrecondition)
}

// attach adopts the running kernel pid of c (left by a previous daemon).
func (c *codeContext) attach(ctx context.Context, pid int, nonce string) error {
	k, sctx := newKernel(c, nonce)
	stop := context.AfterFunc(ctx, k.cancel)
	p, err := c.b.m.sb.ConnectProcess(sctx, c.b.id, pid, k.chans[0], k.chans[1])
	if !stop() && err == nil {
		err = fmt.Errorf("adopt context %s: %w", c.id, ctxErr(ctx))
	}
	if err != nil {
		k.cancel()
		return err
	}
	k.proc.Store(p)
	k.readyOnce.Do(func() { close(k.ready) })
	k.watch(c, p)
	c.mu.Lock()
	c.k = k
	c.mu.Unlock()
	return nil
}

// watch waits in the background for the end of k's stream.
func (k *kernel) watch(c *codeContext, p *agentclient.Process) {
	go func() {
		k.exitRes, _ = p.Wait()
		close(k.exited)
		k.cancel()
		c.kernelExited(k, k.exitReason())
		k.m.kernelGone(k.sandboxID)
	}()
}

// exitReason says how the kernel ended (after exited).
func (k *kernel) exitReason() string {
	r := k.exitRes
	switch {
	case r == nil:
		return "its sandbox stopped answering"
	case r.Signal != 0:
		return fmt.Sprintf("its process was killed by signal %d", r.Signal)
	case r.Status == agentclient.StatusResourceExceeded && r.Error != "":
		return "its process was stopped: " + r.Error
	case r.Status == agentclient.StatusResourceExceeded:
		return "its process exceeded a resource limit"
	default:
		return fmt.Sprintf("its process exited with code %d", r.ExitCode)
	}
}

// tailNote is recent raw output of the kernel, for an error message.
func (k *kernel) tailNote() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	t := strings.TrimSpace(string(bytes.ToValidUTF8(k.tail, []byte("?"))))
	if t == "" {
		return ""
	}
	if len(t) > 512 {
		t = "..." + t[len(t)-512:]
	}
	return ": " + t
}

// isExited reports whether the kernel's stream has ended.
func (k *kernel) isExited() bool {
	select {
	case <-k.exited:
		return true
	default:
		return false
	}
}

// send writes a command to the driver's stdin. Call once the kernel has
// its handle.
func (k *kernel) send(ctx context.Context, b []byte) error {
	p := k.proc.Load()
	if len(b) <= 1<<20 {
		return p.SendInput(ctx, b)
	}
	return p.StreamInput(ctx, bytes.NewReader(b))
}

// interrupt sends SIGINT to the kernel's process group: the driver and
// every child it did not move to a group of its own. The agent signals
// only a process's main pid, so this runs `kill` in the sandbox. Call
// once the kernel has its handle.
func (k *kernel) interrupt(ctx context.Context) error {
	if k.isExited() {
		return nil
	}
	p := k.proc.Load()
	ctx, cancel := context.WithTimeout(ctx, signalTimeout)
	defer cancel()
	res, err := k.m.sb.Exec(ctx, k.sandboxID, agentclient.ExecRequest{
		Shell:   fmt.Sprintf("kill -s INT -- -%d", p.PID),
		Timeout: signalTimeout,
	})
	if err != nil {
		return err
	}
	if res.Status != agentclient.StatusSuccess && !k.isExited() {
		// No shell or no kill: signal the driver alone.
		return p.Signal(ctx, 2)
	}
	return nil
}

// kill kills the kernel's process tree; if the agent cannot be reached
// (or the kernel has no handle yet), it at least ends the stream.
func (k *kernel) kill() {
	if k.isExited() {
		return
	}
	p := k.proc.Load()
	if p == nil {
		k.cancel()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), signalTimeout)
	defer cancel()
	if err := p.Signal(ctx, 9); err != nil && !k.isExited() {
		k.m.log.Debug("kill code kernel", "sandbox", k.sandboxID, "pid", p.PID, "err", err)
		k.cancel()
	}
}

// detach ends the stream without killing the process.
func (k *kernel) detach() { k.cancel() }

// setCell makes cl the cell that receives the kernel's output.
func (k *kernel) setCell(cl *cell) {
	k.mu.Lock()
	k.cell = cl
	k.mu.Unlock()
}

func (k *kernel) clearCell(cl *cell) {
	k.mu.Lock()
	if k.cell == cl {
		k.cell = nil
	}
	k.mu.Unlock()
}

func (k *kernel) currentCell() *cell {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.cell
}

// spent reports whether the kernel has used most of the agent's output
// budget.
func (k *kernel) spent() bool {
	return k.received.Load() > k.m.budget
}

// onRaw handles raw output of one channel (called from the stream's
// goroutine, like onFrame).
func (k *kernel) onRaw(ch *channel, b []byte) {
	cl := k.currentCell()
	if cl == nil {
		k.mu.Lock()
		k.tail = append(k.tail, b...)
		if len(k.tail) > maxTail {
			k.tail = append([]byte(nil), k.tail[len(k.tail)-maxTail:]...)
		}
		k.mu.Unlock()
		return
	}
	typ := EventStdout
	if ch.idx == 1 {
		typ = EventStderr
	}
	cl.output(typ, ch.carry.text(b), true)
}

// onFrame handles one frame from channel idx.
func (k *kernel) onFrame(idx int, b []byte) {
	f, err := parseFrame(b)
	if err != nil {
		k.m.log.Debug("code kernel sent a bad frame", "sandbox", k.sandboxID, "err", err)
		return
	}
	if f.T == "ready" {
		k.readyOnce.Do(func() { close(k.ready) })
		return
	}
	cl := k.currentCell()
	if cl == nil {
		return
	}
	switch f.T {
	case "stdout":
		cl.output(EventStdout, f.D, false)
	case "stderr":
		cl.output(EventStderr, f.D, false)
	case "result":
		if f.ID == cl.id {
			cl.result(resultOf(f))
		}
	case "error":
		if f.ID == cl.id {
			cl.error(ExecError{Name: f.Name, Value: f.Value, Traceback: f.Traceback})
		}
	case "end":
		if f.ID == cl.id {
			cl.endOn(idx, f, k)
		}
	}
}

// flushCarries returns text held back in the channels' UTF-8 carries.
func (k *kernel) flushCarries() (stdout, stderr string) {
	return k.chans[0].carry.flush(), k.chans[1].carry.flush()
}

var _ io.Writer = (*channel)(nil)
