package agentclient

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	agentv1 "github.com/airlock-sandbox/airlock/gen/airlock/agent/v1"
	"github.com/airlock-sandbox/airlock/gen/airlock/agent/v1/agentv1connect"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

func TestModeConversion(t *testing.T) {
	tests := []struct {
		unix uint32
		mode os.FileMode
	}{
		{0o644, 0o644},
		{0o4755, 0o755 | os.ModeSetuid},
		{0o2750, 0o750 | os.ModeSetgid},
		{0o1777, 0o777 | os.ModeSticky},
		{0o7000, os.ModeSetuid | os.ModeSetgid | os.ModeSticky},
	}
	for _, tt := range tests {
		if got := modeFromProto(tt.unix); got != tt.mode {
			t.Errorf("modeFromProto(%#o) = %v, want %v", tt.unix, got, tt.mode)
		}
		if got, err := modeToProto(tt.mode); err != nil || got != tt.unix {
			t.Errorf("modeToProto(%v) = %#o, %v; want %#o", tt.mode, got, err, tt.unix)
		}
	}
	for _, bad := range []os.FileMode{os.ModeDir | 0o755, os.ModeSymlink, os.ModeNamedPipe} {
		if _, err := modeToProto(bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("modeToProto(%v) = %v, want invalid argument", bad, err)
		}
	}
}

func TestEntryFromProto(t *testing.T) {
	e := entryFromProto(&agentv1.EntryInfo{
		Name: "l", Path: "/a/l", Type: agentv1.FileType_FILE_TYPE_SYMLINK, Size: 3,
		Mode: 0o777, Uid: 1000, Gid: 1001, ModifiedUnixNano: 1e9, SymlinkTarget: "x",
	})
	want := EntryInfo{Name: "l", Path: "/a/l", Type: FileTypeSymlink, Size: 3, Mode: 0o777,
		UID: 1000, GID: 1001, ModTime: time.Unix(1, 0), SymlinkTarget: "x"}
	if *e != want {
		t.Errorf("got %+v, want %+v", *e, want)
	}
	types := map[agentv1.FileType]FileType{
		agentv1.FileType_FILE_TYPE_FILE:        FileTypeFile,
		agentv1.FileType_FILE_TYPE_DIRECTORY:   FileTypeDir,
		agentv1.FileType_FILE_TYPE_OTHER:       FileTypeOther,
		agentv1.FileType_FILE_TYPE_UNSPECIFIED: FileTypeOther,
	}
	for in, out := range types {
		if got := entryFromProto(&agentv1.EntryInfo{Type: in}).Type; got != out {
			t.Errorf("type %v -> %v, want %v", in, got, out)
		}
	}
	if entryFromProto(nil) != nil {
		t.Error("nil entry should convert to nil")
	}
}

// fakeFiles records Write streams and serves canned Read and Watch
// streams.
type fakeFiles struct {
	agentv1connect.UnimplementedFileServiceHandler
	mu     sync.Mutex
	writes [][]*agentv1.WriteRequest
	failed error // how the last Write stream ended, if not cleanly
}

func (f *fakeFiles) Write(ctx context.Context, s *connect.ClientStream[agentv1.WriteRequest]) (*connect.Response[agentv1.WriteResponse], error) {
	var msgs []*agentv1.WriteRequest
	var n int
	for s.Receive() {
		msgs = append(msgs, s.Msg())
		n += len(s.Msg().GetData())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.writes = append(f.writes, msgs)
	if err := s.Err(); err != nil {
		f.failed = err
		return nil, err
	}
	if len(msgs) > 0 && msgs[0].GetPath() == "/denied" {
		return nil, connect.NewError(connect.CodePermissionDenied, errors.New("write /denied: permission denied"))
	}
	return connect.NewResponse(&agentv1.WriteResponse{
		Entry:        &agentv1.EntryInfo{Path: msgs[0].GetPath(), Type: agentv1.FileType_FILE_TYPE_FILE, Size: int64(n)},
		BytesWritten: uint64(n),
	}), nil
}

func (f *fakeFiles) Read(ctx context.Context, req *connect.Request[agentv1.ReadRequest], s *connect.ServerStream[agentv1.ReadResponse]) error {
	if req.Msg.GetPath() == "/missing" {
		return connect.NewError(connect.CodeNotFound, errors.New("read /missing: no such file or directory"))
	}
	if err := s.Send(&agentv1.ReadResponse{Entry: &agentv1.EntryInfo{Path: req.Msg.GetPath(), Size: 6}, Data: []byte("abc")}); err != nil {
		return err
	}
	return s.Send(&agentv1.ReadResponse{Data: []byte("def")})
}

func (f *fakeFiles) Watch(ctx context.Context, req *connect.Request[agentv1.WatchRequest], s *connect.ServerStream[agentv1.WatchResponse]) error {
	if err := s.Send(&agentv1.WatchResponse{Event: &agentv1.WatchResponse_Started_{Started: &agentv1.WatchResponse_Started{}}}); err != nil {
		return err
	}
	_ = s.Send(&agentv1.WatchResponse{Event: &agentv1.WatchResponse_Keepalive_{Keepalive: &agentv1.WatchResponse_Keepalive{}}})
	_ = s.Send(&agentv1.WatchResponse{Event: &agentv1.WatchResponse_Change_{Change: &agentv1.WatchResponse_Change{Path: "/w/a", Op: agentv1.WatchOp_WATCH_OP_CREATE}}})
	return connect.NewError(connect.CodeResourceExhausted, errors.New("watch: too many changes"))
}

func serveFake(t *testing.T, h *fakeFiles) *Client {
	t.Helper()
	dir, err := os.MkdirTemp("", "acf")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(agentv1connect.NewFileServiceHandler(h))
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: mux, Protocols: &protocols}
	go func() { _ = srv.Serve(ln) }()
	c := New(func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	})
	t.Cleanup(func() {
		c.Close()
		srv.Close()
		os.RemoveAll(dir)
	})
	return c
}

func TestWriteFileChunks(t *testing.T) {
	fake := &fakeFiles{}
	c := serveFake(t, fake)
	ctx := context.Background()
	tests := []struct {
		name      string
		size      int
		wantMsgs  int
		wantFirst int // data bytes in the header message
	}{
		{"empty still sends the header", 0, 1, 0},
		{"small", 10, 1, 10},
		{"exactly one chunk", chunkSize, 1, chunkSize},
		{"two and a bit chunks", 2*chunkSize + 1, 3, chunkSize},
	}
	for i, tt := range tests {
		data := bytes.Repeat([]byte{'x'}, tt.size)
		e, err := c.WriteFile(ctx, "/f", bytes.NewReader(data), WriteOptions{Mode: 0o600 | os.ModeSetuid, User: "root", MakeParents: true})
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if e.Size != int64(tt.size) {
			t.Errorf("%s: entry size %d", tt.name, e.Size)
		}
		fake.mu.Lock()
		msgs := fake.writes[i]
		fake.mu.Unlock()
		if len(msgs) != tt.wantMsgs || len(msgs[0].GetData()) != tt.wantFirst {
			t.Errorf("%s: %d messages, first carries %d bytes", tt.name, len(msgs), len(msgs[0].GetData()))
		}
		h := msgs[0]
		if h.GetPath() != "/f" || h.GetMode() != 0o4600 || h.GetUser() != "root" || !h.GetMakeParents() || h.GetAppend() {
			t.Errorf("%s: header %+v", tt.name, h)
		}
		for _, m := range msgs[1:] {
			if m.GetPath() != "" || len(m.GetData()) > chunkSize {
				t.Errorf("%s: later message has path %q, %d bytes", tt.name, m.GetPath(), len(m.GetData()))
			}
		}
	}
	_, err := c.WriteFile(ctx, "/denied", strings.NewReader("x"), WriteOptions{})
	if !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("denied write: %v", err)
	}
	_, err = c.WriteFile(ctx, "/f", strings.NewReader("x"), WriteOptions{Mode: os.ModeDir})
	if !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("bad mode: %v", err)
	}
}

func TestWriteFileReaderFailureCancels(t *testing.T) {
	fake := &fakeFiles{}
	c := serveFake(t, fake)
	r := io.MultiReader(bytes.NewReader(make([]byte, 3*chunkSize)), &failReader{})
	_, err := c.WriteFile(context.Background(), "/f", r, WriteOptions{})
	if err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("err = %v", err)
	}
	// The agent must see a broken stream, not a clean end it would commit.
	deadline := time.Now().Add(5 * time.Second)
	for {
		fake.mu.Lock()
		failed, n := fake.failed, len(fake.writes)
		fake.mu.Unlock()
		if n == 1 {
			if failed == nil {
				t.Fatal("the agent saw a clean end of stream")
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the agent never saw the stream end")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type failReader struct{}

func (*failReader) Read([]byte) (int, error) { return 0, errors.New("disk on fire") }

func TestReadFileAndWatch(t *testing.T) {
	c := serveFake(t, &fakeFiles{})
	ctx := context.Background()
	var buf bytes.Buffer
	e, err := c.ReadFile(ctx, "/r", &buf)
	if err != nil || buf.String() != "abcdef" || e.Path != "/r" {
		t.Errorf("read = %q, %+v, %v", buf.String(), e, err)
	}
	if _, err := c.ReadFile(ctx, "/missing", &buf); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("read missing: %v", err)
	}
	ch, err := c.Watch(ctx, "/w", false)
	if err != nil {
		t.Fatal(err)
	}
	var got []WatchEvent
	for ev := range ch {
		got = append(got, ev)
	}
	if len(got) != 2 || got[0].Path != "/w/a" || got[0].Op != WatchCreate || !errors.Is(got[1].Err, errdefs.ErrResourceExhausted) {
		t.Errorf("events = %+v", got)
	}
}
