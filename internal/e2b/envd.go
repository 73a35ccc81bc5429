package e2b

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/airlock-sandbox/airlock/client"
	filesystempb "github.com/airlock-sandbox/airlock/gen/filesystem"
	"github.com/airlock-sandbox/airlock/gen/filesystem/filesystempbconnect"
	processpb "github.com/airlock-sandbox/airlock/gen/process"
	"github.com/airlock-sandbox/airlock/gen/process/processpbconnect"
)

// Bounds of the envd services.
const (
	// maxProcessTimeout bounds a command whose call has no deadline
	// (E2B's timeoutMs 0): the API's longest exec.
	maxProcessTimeout = time.Hour
	// defaultKeepalive is the keepalive interval of a stream whose call
	// names none (Keepalive-Ping-Interval, seconds).
	defaultKeepalive = 50 * time.Second
)

// call is what the envd services need of the request they serve: the
// caller's client, the sandbox, the user the SDK chose, and the request's
// context without the deadline Connect-Timeout-Ms set on the call (which
// is the process's lifetime, not the stream's).
type call struct {
	c    *client.Client
	key  string // the caller's Airlock key
	id   string
	user string
	base context.Context
}

type callKey struct{}

func callOf(ctx context.Context) *call { return ctx.Value(callKey{}).(*call) }

// envd implements envd's process.Process and filesystem.Filesystem
// services on Airlock's API. Its only state is the polled watchers.
type envd struct {
	watchers *watchers
}

var (
	_ processpbconnect.ProcessHandler       = (*envd)(nil)
	_ filesystempbconnect.FilesystemHandler = (*envd)(nil)
)

// connectHandlers are the services' HTTP handlers, by path prefix.
func connectHandlers(e *envd) *http.ServeMux {
	mux := http.NewServeMux()
	opts := []connect.HandlerOption{connect.WithReadMaxBytes(8 << 20)}
	mux.Handle(processpbconnect.NewProcessHandler(e, opts...))
	mux.Handle(filesystempbconnect.NewFilesystemHandler(e, opts...))
	return mux
}

// serveConnect serves a Connect call of envd's services for sandbox id.
func (h *Handler) serveConnect(w http.ResponseWriter, r *http.Request, c *client.Client, id string) {
	u := basicUser(r)
	switch u {
	case "", "user", "root":
	default:
		envdError(w, http.StatusUnauthorized, fmt.Sprintf("user %q does not exist in this sandbox (user or root)", clip(u)))
		return
	}
	key, _ := airlockKey(r)
	cl := &call{c: c, key: key, id: id, user: u, base: r.Context()}
	h.connect.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callKey{}, cl)))
}

// connectError is err as a Connect error with the code the SDKs map.
func connectError(err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	code := connect.CodeInternal
	switch {
	case errors.Is(err, client.ErrNotFound):
		code = connect.CodeNotFound
	case errors.Is(err, client.ErrInvalid), errors.Is(err, client.ErrTooLarge):
		code = connect.CodeInvalidArgument
	case errors.Is(err, client.ErrUnauthorized):
		code = connect.CodeUnauthenticated
	case errors.Is(err, client.ErrForbidden):
		code = connect.CodePermissionDenied
	case errors.Is(err, client.ErrConflict):
		code = connect.CodeFailedPrecondition
	case errors.Is(err, client.ErrRateLimited), errors.Is(err, client.ErrQuotaExceeded):
		code = connect.CodeResourceExhausted
	case errors.Is(err, client.ErrNotSupported):
		code = connect.CodeUnimplemented
	case errors.Is(err, client.ErrTimeout):
		code = connect.CodeDeadlineExceeded
	case errors.Is(err, client.ErrUnavailable):
		code = connect.CodeUnavailable
	case errors.Is(err, context.Canceled):
		code = connect.CodeCanceled
	}
	_, msg := statusOf(err)
	return connect.NewError(code, errors.New(msg))
}

// fail is err as a Connect error; a conflict because the sandbox has
// ended is unavailable, which the SDKs read as "the sandbox is gone".
func (cl *call) fail(err error) error {
	if errors.Is(err, client.ErrConflict) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(cl.base), 10*time.Second)
		defer cancel()
		if _, lerr := live(ctx, cl.c, cl.id); errors.Is(lerr, client.ErrNotFound) {
			return connect.NewError(connect.CodeUnavailable, fmt.Errorf("sandbox %s is not running", ToE2BID(cl.id)))
		}
	}
	return connectError(err)
}

// ---- process.Process ----

// keepalive is the interval of a stream's keepalive events.
func keepalive(h http.Header) time.Duration {
	if s, err := strconv.Atoi(h.Get("Keepalive-Ping-Interval")); err == nil && s > 0 && s <= 3600 {
		return time.Duration(s) * time.Second
	}
	return defaultKeepalive
}

// events sends a process's events on one stream, in order, with
// keepalives while it is quiet.
type events struct {
	mu   sync.Mutex
	send func(*processpb.ProcessEvent) error
	err  error
	pty  bool // the output is a terminal's
}

func (e *events) emit(ev *processpb.ProcessEvent) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err == nil {
		e.err = e.send(ev)
	}
	return e.err
}

func (e *events) output(s client.Stream, b []byte) error {
	data := &processpb.ProcessEvent_DataEvent{}
	if e.pty {
		data.Output = &processpb.ProcessEvent_DataEvent_Pty{Pty: b}
	} else if s == client.Stderr {
		data.Output = &processpb.ProcessEvent_DataEvent_Stderr{Stderr: b}
	} else {
		data.Output = &processpb.ProcessEvent_DataEvent_Stdout{Stdout: b}
	}
	return e.emit(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_Data{Data: data}})
}

func (e *events) start(pid int) error {
	return e.emit(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_Start{Start: &processpb.ProcessEvent_StartEvent{Pid: uint32(pid)}}})
}

// end sends the end event of res.
func (e *events) end(res *client.ExecResult) error {
	end := &processpb.ProcessEvent_EndEvent{ExitCode: int32(res.ExitCode), Exited: res.Signal == 0}
	switch {
	case res.Signal != 0:
		end.Status = "signal: " + signalName(res.Signal)
	default:
		end.Status = "exit status " + strconv.Itoa(res.ExitCode)
	}
	// The SDKs make the error the message of CommandExitError.
	switch {
	case res.Error != "":
		msg := res.Error
		end.Error = &msg
	case res.Status == client.StatusTimeout:
		msg := "the process ran past its timeout and was killed"
		end.Error = &msg
	case res.ExitCode != 0 || res.Signal != 0:
		msg := end.Status
		end.Error = &msg
	}
	return e.emit(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_End{End: end}})
}

// keep sends keepalive events every d until stop closes.
func (e *events) keep(d time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			_ = e.emit(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_Keepalive{Keepalive: &processpb.ProcessEvent_KeepAlive{}}})
		}
	}
}

func signalName(sig int) string {
	switch sig {
	case 9:
		return "killed"
	case 15:
		return "terminated"
	case 2:
		return "interrupt"
	case 1:
		return "hangup"
	}
	return "signal " + strconv.Itoa(sig)
}

// Start runs a command: Connect-Timeout-Ms (the call's deadline) is its
// lifetime, as envd has it; it runs on when the stream ends first.
func (*envd) Start(ctx context.Context, req *connect.Request[processpb.StartRequest], stream *connect.ServerStream[processpb.StartResponse]) error {
	cl := callOf(ctx)
	cfg := req.Msg.GetProcess()
	if cfg == nil || cfg.GetCmd() == "" {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("process.cmd is required"))
	}
	timeout := maxProcessTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(dl), time.Second)
	}
	ev := &events{send: func(e *processpb.ProcessEvent) error { return stream.Send(&processpb.StartResponse{Event: e}) }}
	ereq := client.ExecRequest{
		Cmd: append([]string{cfg.GetCmd()}, cfg.GetArgs()...), Env: cfg.GetEnvs(), Cwd: cfg.GetCwd(), User: cl.user,
		Timeout: timeout, Background: true, Tag: req.Msg.GetTag(), KeepStdin: req.Msg.GetStdin(),
		OnStart: func(pid int) { _ = ev.start(pid) },
	}
	if pty := req.Msg.GetPty(); pty != nil {
		size := pty.GetSize()
		ereq.Pty = &client.PtySize{Cols: int(size.GetCols()), Rows: int(size.GetRows())}
		if ereq.Pty.Cols == 0 || ereq.Pty.Rows == 0 {
			ereq.Pty.Cols, ereq.Pty.Rows = 80, 24
		}
		ev.pty = true
	}
	return runEvents(cl, ev, keepalive(req.Header()), func(ctx context.Context) (*client.ExecResult, error) {
		return cl.c.ExecStream(ctx, cl.id, ereq, ev.output)
	})
}

// runEvents runs fn (a stream of the process's output) with keepalives,
// and ends the stream with the end event.
func runEvents(cl *call, ev *events, every time.Duration, fn func(context.Context) (*client.ExecResult, error)) error {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { ev.keep(every, stop) })
	res, err := fn(cl.base)
	close(stop)
	wg.Wait()
	if err != nil {
		return cl.fail(err)
	}
	return ev.end(res)
}

// Connect follows a running process: its start event (the pid), its
// output from now on, its end.
func (*envd) Connect(ctx context.Context, req *connect.Request[processpb.ConnectRequest], stream *connect.ServerStream[processpb.ConnectResponse]) error {
	cl := callOf(ctx)
	pid, err := resolvePID(ctx, cl, req.Msg.GetProcess())
	if err != nil {
		return err
	}
	ev := &events{send: func(e *processpb.ProcessEvent) error { return stream.Send(&processpb.ConnectResponse{Event: e}) }}
	if err := ev.start(pid); err != nil {
		return err
	}
	return runEvents(cl, ev, keepalive(req.Header()), func(ctx context.Context) (*client.ExecResult, error) {
		return cl.c.FollowProcess(ctx, cl.id, pid, ev.output)
	})
}

// resolvePID finds the pid a selector names: its pid, or the process
// started with its tag.
func resolvePID(ctx context.Context, cl *call, sel *processpb.ProcessSelector) (int, error) {
	if sel == nil {
		return 0, connect.NewError(connect.CodeInvalidArgument, errors.New("process is required"))
	}
	if tag := sel.GetTag(); tag != "" {
		list, err := cl.c.ListProcesses(ctx, cl.id)
		if err != nil {
			return 0, connectError(err)
		}
		for _, p := range list.Processes {
			if p.StartedByAgent && p.Tag == tag {
				return p.PID, nil
			}
		}
		return 0, connect.NewError(connect.CodeNotFound, fmt.Errorf("no process has tag %q", clip(tag)))
	}
	if pid := sel.GetPid(); pid > 0 {
		return int(pid), nil
	}
	return 0, connect.NewError(connect.CodeInvalidArgument, errors.New("process needs a pid or a tag"))
}

// List returns the running processes started through the API.
func (*envd) List(ctx context.Context, req *connect.Request[processpb.ListRequest]) (*connect.Response[processpb.ListResponse], error) {
	cl := callOf(ctx)
	list, err := cl.c.ListProcesses(ctx, cl.id)
	if err != nil {
		return nil, cl.fail(err)
	}
	out := &processpb.ListResponse{}
	for _, p := range list.Processes {
		if !p.StartedByAgent || len(p.Cmd) == 0 {
			continue
		}
		info := &processpb.ProcessInfo{Pid: uint32(p.PID), Config: &processpb.ProcessConfig{Cmd: p.Cmd[0], Args: p.Cmd[1:], Envs: map[string]string{}}}
		if p.Tag != "" {
			tag := p.Tag
			info.Tag = &tag
		}
		out.Processes = append(out.Processes, info)
	}
	return connect.NewResponse(out), nil
}

// SendInput writes to a process's stdin.
func (*envd) SendInput(ctx context.Context, req *connect.Request[processpb.SendInputRequest]) (*connect.Response[processpb.SendInputResponse], error) {
	cl := callOf(ctx)
	pid, err := resolvePID(ctx, cl, req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	in := req.Msg.GetInput()
	data := in.GetStdin()
	if in.GetPty() != nil {
		data = in.GetPty() // a terminal's input goes to its stdin
	}
	if err := cl.c.SendProcessInput(ctx, cl.id, pid, data, false); err != nil {
		return nil, cl.fail(err)
	}
	return connect.NewResponse(&processpb.SendInputResponse{}), nil
}

// StreamInput writes a client stream of input to one process.
func (*envd) StreamInput(ctx context.Context, stream *connect.ClientStream[processpb.StreamInputRequest]) (*connect.Response[processpb.StreamInputResponse], error) {
	cl := callOf(ctx)
	pid := 0
	for stream.Receive() {
		msg := stream.Msg()
		switch {
		case msg.GetStart() != nil:
			p, err := resolvePID(ctx, cl, msg.GetStart().GetProcess())
			if err != nil {
				return nil, err
			}
			pid = p
		case msg.GetData() != nil:
			if pid == 0 {
				return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("the stream's first message must name the process"))
			}
			in := msg.GetData().GetInput()
			data := in.GetStdin()
			if in.GetPty() != nil {
				data = in.GetPty()
			}
			if err := cl.c.SendProcessInput(ctx, cl.id, pid, data, false); err != nil {
				return nil, cl.fail(err)
			}
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&processpb.StreamInputResponse{}), nil
}

// CloseStdin closes a process's stdin.
func (*envd) CloseStdin(ctx context.Context, req *connect.Request[processpb.CloseStdinRequest]) (*connect.Response[processpb.CloseStdinResponse], error) {
	cl := callOf(ctx)
	pid, err := resolvePID(ctx, cl, req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := cl.c.SendProcessInput(ctx, cl.id, pid, nil, true); err != nil {
		return nil, cl.fail(err)
	}
	return connect.NewResponse(&processpb.CloseStdinResponse{}), nil
}

// SendSignal sends SIGTERM or SIGKILL.
func (*envd) SendSignal(ctx context.Context, req *connect.Request[processpb.SendSignalRequest]) (*connect.Response[processpb.SendSignalResponse], error) {
	cl := callOf(ctx)
	pid, err := resolvePID(ctx, cl, req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	sig := "KILL"
	switch req.Msg.GetSignal() {
	case processpb.Signal_SIGNAL_SIGTERM:
		sig = "TERM"
	case processpb.Signal_SIGNAL_SIGKILL:
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("signal must be SIGTERM or SIGKILL"))
	}
	if err := cl.c.SignalProcess(ctx, cl.id, pid, sig); err != nil {
		return nil, cl.fail(err)
	}
	return connect.NewResponse(&processpb.SendSignalResponse{}), nil
}

// Update resizes a process's terminal.
func (*envd) Update(ctx context.Context, req *connect.Request[processpb.UpdateRequest]) (*connect.Response[processpb.UpdateResponse], error) {
	cl := callOf(ctx)
	pid, err := resolvePID(ctx, cl, req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	size := req.Msg.GetPty().GetSize()
	if size == nil {
		return connect.NewResponse(&processpb.UpdateResponse{}), nil // nothing to change
	}
	if err := cl.c.ResizeProcess(ctx, cl.id, pid, int(size.GetCols()), int(size.GetRows())); err != nil {
		return nil, cl.fail(err)
	}
	return connect.NewResponse(&processpb.UpdateResponse{}), nil
}

// ---- filesystem.Filesystem ----

func fileOpt(cl *call) client.FileOption { return client.AsUser(cl.user) }

// entryInfo is envd's EntryInfo of fi.
func entryInfo(fi *client.FileInfo) *filesystempb.EntryInfo {
	e := &filesystempb.EntryInfo{
		Name: fi.Name, Path: fi.Path, Size: fi.Size, Mode: fi.Mode & 0o7777,
		Permissions: fs.FileMode(fi.Mode & 0o777).String(), Owner: ownerName(fi.UID), Group: ownerName(fi.GID),
		ModifiedTime: timestamppb.New(fi.ModTime), Metadata: map[string]string{},
	}
	switch fi.Type {
	case "file":
		e.Type = filesystempb.FileType_FILE_TYPE_FILE
	case "dir":
		e.Type = filesystempb.FileType_FILE_TYPE_DIRECTORY
		e.Permissions = "d" + e.Permissions[1:]
	case "symlink":
		e.Type = filesystempb.FileType_FILE_TYPE_SYMLINK
		e.Permissions = "L" + e.Permissions[1:]
		t := fi.SymlinkTarget
		e.SymlinkTarget = &t
	}
	return e
}

// ownerName names a sandbox uid as the sandbox does: 0 root, 1000 user.
func ownerName(id uint32) string {
	switch id {
	case 0:
		return "root"
	case 1000:
		return "user"
	}
	return strconv.Itoa(int(id))
}

// legacySDK reports an SDK that cannot decode fields newer than envd's
// first (e2b's Python SDK up to 1.5.2, User-Agent connect-python): it
// gets entries with name, type and path only, as envd gives it.
func legacySDK(h http.Header) bool { return h.Get("User-Agent") == "connect-python" }

// legacyEntries strips entries to what a legacy SDK reads, and marks
// the response as envd does.
func legacyEntries(req http.Header, resp http.Header, entries ...*filesystempb.EntryInfo) {
	if !legacySDK(req) {
		return
	}
	for _, e := range entries {
		*e = filesystempb.EntryInfo{Name: e.GetName(), Type: e.GetType(), Path: e.GetPath()}
	}
	resp.Set("X-E2b-Legacy-Sdk", "true")
}

func (*envd) Stat(ctx context.Context, req *connect.Request[filesystempb.StatRequest]) (*connect.Response[filesystempb.StatResponse], error) {
	cl := callOf(ctx)
	fi, err := cl.c.StatFile(ctx, cl.id, req.Msg.GetPath(), fileOpt(cl))
	if err != nil {
		return nil, cl.fail(err)
	}
	resp := connect.NewResponse(&filesystempb.StatResponse{Entry: entryInfo(fi)})
	legacyEntries(req.Header(), resp.Header(), resp.Msg.Entry)
	return resp, nil
}

// MakeDir creates a directory and its parents; one that exists is
// already_exists, which the SDKs read as false.
func (*envd) MakeDir(ctx context.Context, req *connect.Request[filesystempb.MakeDirRequest]) (*connect.Response[filesystempb.MakeDirResponse], error) {
	cl := callOf(ctx)
	p := req.Msg.GetPath()
	if fi, err := cl.c.StatFile(ctx, cl.id, p, fileOpt(cl)); err == nil {
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("%s already exists (a %s)", clip(fi.Path), fi.Type))
	} else if !errors.Is(err, client.ErrNotFound) {
		return nil, cl.fail(err)
	}
	fi, err := cl.c.MakeDir(ctx, cl.id, p, fileOpt(cl))
	if err != nil {
		return nil, cl.fail(err)
	}
	resp := connect.NewResponse(&filesystempb.MakeDirResponse{Entry: entryInfo(fi)})
	legacyEntries(req.Header(), resp.Header(), resp.Msg.Entry)
	return resp, nil
}

func (*envd) Move(ctx context.Context, req *connect.Request[filesystempb.MoveRequest]) (*connect.Response[filesystempb.MoveResponse], error) {
	cl := callOf(ctx)
	fi, err := cl.c.MoveFile(ctx, cl.id, req.Msg.GetSource(), req.Msg.GetDestination(), fileOpt(cl))
	if err != nil {
		return nil, cl.fail(err)
	}
	resp := connect.NewResponse(&filesystempb.MoveResponse{Entry: entryInfo(fi)})
	legacyEntries(req.Header(), resp.Header(), resp.Msg.Entry)
	return resp, nil
}

// ListDir lists a directory to a depth (0 is 1, as envd has it).
func (*envd) ListDir(ctx context.Context, req *connect.Request[filesystempb.ListDirRequest]) (*connect.Response[filesystempb.ListDirResponse], error) {
	cl := callOf(ctx)
	depth := max(int(req.Msg.GetDepth()), 1)
	p := req.Msg.GetPath()
	if p == "" {
		p = "."
	}
	entries, _, err := cl.c.ListDir(ctx, cl.id, p, depth, fileOpt(cl))
	if err != nil {
		return nil, cl.fail(err)
	}
	out := &filesystempb.ListDirResponse{Entries: make([]*filesystempb.EntryInfo, 0, len(entries))}
	for i := range entries {
		out.Entries = append(out.Entries, entryInfo(&entries[i]))
	}
	resp := connect.NewResponse(out)
	legacyEntries(req.Header(), resp.Header(), out.Entries...)
	return resp, nil
}

func (*envd) Remove(ctx context.Context, req *connect.Request[filesystempb.RemoveRequest]) (*connect.Response[filesystempb.RemoveResponse], error) {
	cl := callOf(ctx)
	if err := cl.c.RemoveFile(ctx, cl.id, req.Msg.GetPath(), true, fileOpt(cl)); err != nil {
		return nil, cl.fail(err)
	}
	return connect.NewResponse(&filesystempb.RemoveResponse{}), nil
}

// eventType is envd's type of a watch change.
func eventType(op string) filesystempb.EventType {
	switch op {
	case "create":
		return filesystempb.EventType_EVENT_TYPE_CREATE
	case "write":
		return filesystempb.EventType_EVENT_TYPE_WRITE
	case "remove":
		return filesystempb.EventType_EVENT_TYPE_REMOVE
	case "rename":
		return filesystempb.EventType_EVENT_TYPE_RENAME
	case "chmod":
		return filesystempb.EventType_EVENT_TYPE_CHMOD
	}
	return filesystempb.EventType_EVENT_TYPE_UNSPECIFIED
}

// watchRoot is the absolute path of the directory a watch names, for
// the events' names, which are relative to it.
func watchRoot(ctx context.Context, cl *call, p string) (string, error) {
	fi, err := cl.c.StatFile(ctx, cl.id, p, fileOpt(cl))
	if err != nil {
		return "", cl.fail(err)
	}
	if fi.Type != "dir" {
		return "", connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s is not a directory", clip(fi.Path)))
	}
	return fi.Path, nil
}

// fsEvent is envd's event of a change under root.
func fsEvent(root string, ev client.WatchEvent) *filesystempb.FilesystemEvent {
	name := strings.TrimPrefix(strings.TrimPrefix(ev.Path, root), "/")
	return &filesystempb.FilesystemEvent{Name: name, Type: eventType(ev.Op)}
}

// WatchDir streams the changes under a directory: a start event, then
// one per change, with keepalives, until the call's deadline (E2B's
// timeoutMs) or the client goes.
func (*envd) WatchDir(ctx context.Context, req *connect.Request[filesystempb.WatchDirRequest], stream *connect.ServerStream[filesystempb.WatchDirResponse]) error {
	cl := callOf(ctx)
	root, err := watchRoot(ctx, cl, req.Msg.GetPath())
	if err != nil {
		return err
	}
	var mu sync.Mutex
	send := func(r *filesystempb.WatchDirResponse) error {
		mu.Lock()
		defer mu.Unlock()
		return stream.Send(r)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(stop); wg.Wait() }()
	err = cl.c.WatchDir(ctx, cl.id, root, req.Msg.GetRecursive(), func() {
		_ = send(&filesystempb.WatchDirResponse{Event: &filesystempb.WatchDirResponse_Start{Start: &filesystempb.WatchDirResponse_StartEvent{}}})
		every := keepalive(req.Header())
		wg.Go(func() {
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					_ = send(&filesystempb.WatchDirResponse{Event: &filesystempb.WatchDirResponse_Keepalive{Keepalive: &filesystempb.WatchDirResponse_KeepAlive{}}})
				}
			}
		})
	}, func(ev client.WatchEvent) error {
		return send(&filesystempb.WatchDirResponse{Event: &filesystempb.WatchDirResponse_Filesystem{Filesystem: fsEvent(root, ev)}})
	}, fileOpt(cl))
	if err != nil && ctx.Err() != nil {
		return nil // the call's deadline: the watch's end
	}
	if err != nil {
		return connectError(err)
	}
	return nil
}

// CreateWatcher starts a watch whose events are kept for polling (for
// clients that cannot hold a stream), once it is in place.
func (e *envd) CreateWatcher(ctx context.Context, req *connect.Request[filesystempb.CreateWatcherRequest]) (*connect.Response[filesystempb.CreateWatcherResponse], error) {
	cl := callOf(ctx)
	root, err := watchRoot(ctx, cl, req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	id, err := e.watchers.start(ctx, cl, root, req.Msg.GetRecursive())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystempb.CreateWatcherResponse{WatcherId: id}), nil
}

// GetWatcherEvents returns, and forgets, the events a watcher kept.
func (e *envd) GetWatcherEvents(ctx context.Context, req *connect.Request[filesystempb.GetWatcherEventsRequest]) (*connect.Response[filesystempb.GetWatcherEventsResponse], error) {
	evs, err := e.watchers.take(callOf(ctx), req.Msg.GetWatcherId())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystempb.GetWatcherEventsResponse{Events: evs}), nil
}

// RemoveWatcher stops a watcher.
func (e *envd) RemoveWatcher(ctx context.Context, req *connect.Request[filesystempb.RemoveWatcherRequest]) (*connect.Response[filesystempb.RemoveWatcherResponse], error) {
	if err := e.watchers.remove(callOf(ctx), req.Msg.GetWatcherId()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystempb.RemoveWatcherResponse{}), nil
}
