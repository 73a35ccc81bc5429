package agentclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"connectrpc.com/connect"

	agentv1 "github.com/airlock-sandbox/airlock/gen/airlock/agent/v1"
	"github.com/airlock-sandbox/airlock/internal/agentwire"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// FileType is the kind of a filesystem entry.
type FileType string

// The file types an EntryInfo reports.
const (
	FileTypeFile    FileType = "file"
	FileTypeDir     FileType = "dir"
	FileTypeSymlink FileType = "symlink"
	FileTypeOther   FileType = "other" // FIFO, socket, device
)

// EntryInfo describes a file or directory inside the sandbox.
type EntryInfo struct {
	// Name is the last element of Path ("/" for the root).
	Name string
	// Path is the absolute path inside the sandbox.
	Path string
	Type FileType
	Size int64
	// Mode holds the permission bits and os.ModeSetuid, os.ModeSetgid and
	// os.ModeSticky; the type is in Type.
	Mode    os.FileMode
	UID     uint32
	GID     uint32
	ModTime time.Time
	// SymlinkTarget is the target of a symlink, as stored in the link.
	SymlinkTarget string
}

// FileOption tunes a file request other than WriteFile (which takes
// WriteOptions).
type FileOption func(*fileOptions)

type fileOptions struct {
	user string
}

// AsUser makes a file request act as user: "user", "root", or "" for the
// sandbox's default user (the default). The agent performs the request
// with that user's permissions, as a command of that user would.
func AsUser(user string) FileOption {
	return func(o *fileOptions) { o.user = user }
}

func fileOpts(opts []FileOption) fileOptions {
	var o fileOptions
	for _, f := range opts {
		f(&o)
	}
	return o
}

// WriteOptions tune WriteFile.
type WriteOptions struct {
	// Mode holds permission bits (and optionally setuid, setgid, sticky)
	// for the file. 0 keeps the mode of a file being replaced, or 0644.
	Mode os.FileMode
	// User is whose permissions the write acts with, and who owns what it
	// creates: "user", "root", or "" for the sandbox's default user.
	User string
	// MakeParents creates missing parent directories.
	MakeParents bool
	// Append appends in place instead of replacing the file atomically.
	Append bool
}

// WatchOp is the kind of a change a watch reports.
type WatchOp string

// The changes a watch reports.
const (
	WatchCreate WatchOp = "create" // created, or moved in
	WatchWrite  WatchOp = "write"
	WatchRemove WatchOp = "remove"
	WatchRename WatchOp = "rename" // moved away
	WatchChmod  WatchOp = "chmod"  // attributes changed
)

// WatchEvent is one change under a watched directory. The last event on
// the channel may carry only Err: why the watch ended abnormally.
type WatchEvent struct {
	// Path is the absolute sandbox path that changed.
	Path string
	Op   WatchOp
	Err  error
}

// chunkSize is the data size of one Write message.
const chunkSize = 256 << 10

// Stat describes path without following a final symlink.
func (c *Client) Stat(ctx context.Context, path string, opts ...FileOption) (*EntryInfo, error) {
	o := fileOpts(opts)
	res, err := c.files.Stat(ctx, connect.NewRequest(&agentv1.StatRequest{Path: path, User: o.user}))
	if err != nil {
		return nil, agentwire.FromConnect(err)
	}
	return entryFromProto(res.Msg.GetEntry()), nil
}

// ListDir lists the directory at path to depth levels (0 and 1 list its
// entries only). truncated reports that the agent's entry cap was hit.
func (c *Client) ListDir(ctx context.Context, path string, depth int, opts ...FileOption) (entries []EntryInfo, truncated bool, err error) {
	if depth < 0 || depth > 1<<16 {
		return nil, false, fmt.Errorf("list %s: depth %d out of range: %w", path, depth, errdefs.ErrInvalidArgument)
	}
	o := fileOpts(opts)
	res, err := c.files.ListDir(ctx, connect.NewRequest(&agentv1.ListDirRequest{Path: path, Depth: uint32(depth), User: o.user}))
	if err != nil {
		return nil, false, agentwire.FromConnect(err)
	}
	entries = make([]EntryInfo, 0, len(res.Msg.GetEntries()))
	for _, e := range res.Msg.GetEntries() {
		entries = append(entries, *entryFromProto(e))
	}
	return entries, res.Msg.GetTruncated(), nil
}

// ReadFile streams the whole file at path into w, without buffering it,
// and returns its description.
func (c *Client) ReadFile(ctx context.Context, path string, w io.Writer, opts ...FileOption) (*EntryInfo, error) {
	return c.ReadFileRange(ctx, path, 0, 0, w, opts...)
}

// ReadFileRange streams at most limit bytes (0: to the end) from offset
// of the file at path into w.
func (c *Client) ReadFileRange(ctx context.Context, path string, offset, limit int64, w io.Writer, opts ...FileOption) (*EntryInfo, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	o := fileOpts(opts)
	stream, err := c.files.Read(ctx, connect.NewRequest(&agentv1.ReadRequest{Path: path, Offset: offset, Limit: limit, User: o.user}))
	if err != nil {
		return nil, agentwire.FromConnect(err)
	}
	// Cancel before closing: closing drains what the agent still sends.
	defer func() { cancel(); _ = stream.Close() }()
	var info *EntryInfo
	for stream.Receive() {
		msg := stream.Msg()
		if info == nil {
			if msg.GetEntry() == nil {
				return nil, fmt.Errorf("read %s: agent sent no entry: %w", path, errdefs.ErrInternal)
			}
			info = entryFromProto(msg.GetEntry())
		}
		if len(msg.GetData()) > 0 {
			if _, err := w.Write(msg.GetData()); err != nil {
				return info, fmt.Errorf("read %s: %w", path, err)
			}
		}
	}
	if err := stream.Err(); err != nil {
		return info, agentwire.FromConnect(err)
	}
	if info == nil {
		return nil, fmt.Errorf("read %s: agent sent nothing: %w", path, errdefs.ErrInternal)
	}
	return info, nil
}

// WriteFile streams r into the file at path in chunks of 256 KiB. Unless
// opts.Append is set the file is replaced atomically once r is drained; if
// r fails or ctx ends first, the old file is left as it was.
func (c *Client) WriteFile(ctx context.Context, path string, r io.Reader, opts WriteOptions) (*EntryInfo, error) {
	mode, err := modeToProto(opts.Mode)
	if err != nil {
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	// Cancelling the stream (rather than closing it) is what tells the
	// agent to discard a partial upload.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream := c.files.Write(ctx)
	msg := &agentv1.WriteRequest{
		Path:        path,
		Mode:        mode,
		User:        opts.User,
		MakeParents: opts.MakeParents,
		Append:      opts.Append,
	}
	buf := make([]byte, chunkSize)
	for first := true; ; first = false {
		n, rerr := io.ReadFull(r, buf)
		if n > 0 || first {
			msg.Data = buf[:n]
			if err := stream.Send(msg); err != nil {
				if errors.Is(err, io.EOF) {
					// The agent ended the stream; its answer says why.
					_, err = stream.CloseAndReceive()
				}
				return nil, agentwire.FromConnect(err)
			}
			msg = &agentv1.WriteRequest{}
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			// Abort (RST_STREAM) rather than close: a cleanly closed
			// request body would look to the agent like a complete file.
			// The request goroutine cleans up once the abort lands.
			cancel()
			return nil, fmt.Errorf("write %s: reading the content: %w", path, rerr)
		}
	}
	res, err := stream.CloseAndReceive()
	if err != nil {
		return nil, agentwire.FromConnect(err)
	}
	return entryFromProto(res.Msg.GetEntry()), nil
}

// MakeDir creates the directory at path; with parents, missing parents
// too, and an existing directory is not an error.
func (c *Client) MakeDir(ctx context.Context, path string, parents bool, opts ...FileOption) (*EntryInfo, error) {
	o := fileOpts(opts)
	res, err := c.files.MakeDir(ctx, connect.NewRequest(&agentv1.MakeDirRequest{Path: path, Parents: parents, User: o.user}))
	if err != nil {
		return nil, agentwire.FromConnect(err)
	}
	return entryFromProto(res.Msg.GetEntry()), nil
}

// Move renames src to dst (replacing a file at dst, as rename(2) does).
func (c *Client) Move(ctx context.Context, src, dst string, opts ...FileOption) (*EntryInfo, error) {
	o := fileOpts(opts)
	res, err := c.files.Move(ctx, connect.NewRequest(&agentv1.MoveRequest{Source: src, Destination: dst, User: o.user}))
	if err != nil {
		return nil, agentwire.FromConnect(err)
	}
	return entryFromProto(res.Msg.GetEntry()), nil
}

// Remove deletes the file, symlink or (with recursive) directory tree at
// path.
func (c *Client) Remove(ctx context.Context, path string, recursive bool, opts ...FileOption) error {
	o := fileOpts(opts)
	_, err := c.files.Remove(ctx, connect.NewRequest(&agentv1.RemoveRequest{Path: path, Recursive: recursive, User: o.user}))
	return agentwire.FromConnect(err)
}

// Chmod sets the permission bits (and setuid, setgid, sticky) of path.
func (c *Client) Chmod(ctx context.Context, path string, mode os.FileMode, opts ...FileOption) (*EntryInfo, error) {
	m, err := modeToProto(mode)
	if err != nil {
		return nil, fmt.Errorf("chmod %s: %w", path, err)
	}
	o := fileOpts(opts)
	res, err := c.files.Chmod(ctx, connect.NewRequest(&agentv1.ChmodRequest{Path: path, Mode: m, User: o.user}))
	if err != nil {
		return nil, agentwire.FromConnect(err)
	}
	return entryFromProto(res.Msg.GetEntry()), nil
}

// Watch watches the directory at path (and with recursive its
// subdirectories) and returns once the watch is in place. The channel is
// closed when ctx ends or the watch ends; an abnormal end is reported by a
// final event with Err set. The caller must drain the channel or cancel
// ctx.
func (c *Client) Watch(ctx context.Context, path string, recursive bool, opts ...FileOption) (<-chan WatchEvent, error) {
	ctx, cancel := context.WithCancel(ctx)
	o := fileOpts(opts)
	stream, err := c.files.Watch(ctx, connect.NewRequest(&agentv1.WatchRequest{Path: path, Recursive: recursive, User: o.user}))
	if err != nil {
		cancel()
		return nil, agentwire.FromConnect(err)
	}
	if !stream.Receive() {
		err := stream.Err()
		stream.Close()
		cancel()
		if err == nil {
			return nil, fmt.Errorf("watch %s: agent ended the stream: %w", path, errdefs.ErrUnavailable)
		}
		return nil, agentwire.FromConnect(err)
	}
	if stream.Msg().GetStarted() == nil {
		stream.Close()
		cancel()
		return nil, fmt.Errorf("watch %s: agent did not start the watch: %w", path, errdefs.ErrInternal)
	}
	ch := make(chan WatchEvent, 64)
	go func() {
		defer close(ch)
		defer func() { cancel(); _ = stream.Close() }()
		for stream.Receive() {
			c := stream.Msg().GetChange()
			if c == nil {
				continue // keepalive
			}
			select {
			case ch <- WatchEvent{Path: c.GetPath(), Op: watchOpFromProto(c.GetOp())}:
			case <-ctx.Done():
				return
			}
		}
		if err := stream.Err(); err != nil && ctx.Err() == nil {
			select {
			case ch <- WatchEvent{Err: agentwire.FromConnect(err)}:
			case <-ctx.Done():
			}
		}
	}()
	return ch, nil
}

// entryFromProto converts the agent's description of a file.
func entryFromProto(e *agentv1.EntryInfo) *EntryInfo {
	if e == nil {
		return nil
	}
	out := &EntryInfo{
		Name:          e.GetName(),
		Path:          e.GetPath(),
		Size:          e.GetSize(),
		Mode:          modeFromProto(e.GetMode()),
		UID:           e.GetUid(),
		GID:           e.GetGid(),
		SymlinkTarget: e.GetSymlinkTarget(),
	}
	if ns := e.GetModifiedUnixNano(); ns != 0 {
		out.ModTime = time.Unix(0, ns)
	}
	switch e.GetType() {
	case agentv1.FileType_FILE_TYPE_FILE:
		out.Type = FileTypeFile
	case agentv1.FileType_FILE_TYPE_DIRECTORY:
		out.Type = FileTypeDir
	case agentv1.FileType_FILE_TYPE_SYMLINK:
		out.Type = FileTypeSymlink
	default:
		out.Type = FileTypeOther
	}
	return out
}

// modeFromProto turns Unix mode bits (07777) into an os.FileMode.
func modeFromProto(m uint32) os.FileMode {
	mode := os.FileMode(m & 0o777)
	if m&0o4000 != 0 {
		mode |= os.ModeSetuid
	}
	if m&0o2000 != 0 {
		mode |= os.ModeSetgid
	}
	if m&0o1000 != 0 {
		mode |= os.ModeSticky
	}
	return mode
}

// modeToProto turns an os.FileMode into Unix mode bits, refusing type
// bits.
func modeToProto(mode os.FileMode) (uint32, error) {
	if mode&^(os.ModePerm|os.ModeSetuid|os.ModeSetgid|os.ModeSticky) != 0 {
		return 0, fmt.Errorf("mode %v has more than permission bits: %w", mode, errdefs.ErrInvalidArgument)
	}
	m := uint32(mode & os.ModePerm)
	if mode&os.ModeSetuid != 0 {
		m |= 0o4000
	}
	if mode&os.ModeSetgid != 0 {
		m |= 0o2000
	}
	if mode&os.ModeSticky != 0 {
		m |= 0o1000
	}
	return m, nil
}

// watchOpFromProto converts a change kind.
func watchOpFromProto(op agentv1.WatchOp) WatchOp {
	switch op {
	case agentv1.WatchOp_WATCH_OP_CREATE:
		return WatchCreate
	case agentv1.WatchOp_WATCH_OP_WRITE:
		return WatchWrite
	case agentv1.WatchOp_WATCH_OP_REMOVE:
		return WatchRemove
	case agentv1.WatchOp_WATCH_OP_RENAME:
		return WatchRename
	case agentv1.WatchOp_WATCH_OP_CHMOD:
		return WatchChmod
	}
	return WatchOp("unknown")
}

// ExportChanges writes everything written to the sandbox's root
// filesystem since it started to w, as an uncompressed OCI layer tar
// (deletions as whiteouts). The sandbox must be quiet: files changing
// during the export may be captured half-written.
func (c *Client) ExportChanges(ctx context.Context, w io.Writer) error {
	stream, err := c.files.ExportChanges(ctx, connect.NewRequest(&agentv1.ExportChangesRequest{}))
	if err != nil {
		return agentwire.FromConnect(err)
	}
	defer stream.Close()
	for stream.Receive() {
		if _, err := w.Write(stream.Msg().GetData()); err != nil {
			return err
		}
	}
	return agentwire.FromConnect(stream.Err())
}
