package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/tracing"
)

// maxListDepth caps the depth of a directory listing.
const maxListDepth = 32

// toEntryJSON is the wire form of a file or directory in a sandbox. Mode
// holds the Unix permission bits including setuid (04000), setgid (02000)
// and sticky (01000). Names that are not valid UTF-8 are shown with
// U+FFFD in place of the bad bytes.
func toEntryJSON(e *agentclient.EntryInfo) wire.FileEntry {
	mode := uint32(e.Mode.Perm())
	if e.Mode&os.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if e.Mode&os.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if e.Mode&os.ModeSticky != 0 {
		mode |= 0o1000
	}
	return wire.FileEntry{
		Name:          e.Name,
		Path:          e.Path,
		Type:          string(e.Type),
		Size:          e.Size,
		Mode:          mode,
		UID:           e.UID,
		GID:           e.GID,
		ModTime:       e.ModTime.UTC(),
		SymlinkTarget: e.SymlinkTarget,
	}
}

// parseQuery parses raw, rejecting parameters not in allowed and
// parameters given twice.
func parseQuery(raw string, allowed ...string) (url.Values, error) {
	q, err := url.ParseQuery(raw)
	if err != nil {
		return nil, invalidf("malformed query string")
	}
	for k, v := range q {
		known := false
		for _, a := range allowed {
			known = known || k == a
		}
		if !known {
			return nil, invalidf("unknown query parameter %q; want %s", clean(truncate(k, 64)), strings.Join(allowed, ", "))
		}
		if len(v) > 1 {
			return nil, invalidf("query parameter %q is given more than once", k)
		}
	}
	return q, nil
}

// checkPath validates a sandbox path from a query string. Relative paths
// are relative to the user's home in the sandbox; the agent resolves
// every path inside the sandbox's root.
func checkPath(p string) error {
	switch {
	case p == "":
		return invalidf("the path query parameter is required")
	case len(p) > maxPathBytes:
		return invalidf("path is longer than %d bytes", maxPathBytes)
	case strings.IndexByte(p, 0) >= 0:
		return invalidf("path must not contain NUL bytes")
	case !utf8.ValidString(p):
		return invalidf("path must be valid UTF-8")
	}
	return nil
}

// fileQuery is the parsed query of a file route.
type fileQuery struct {
	path string
	// user is whose permissions the agent acts with: "user", "root" or
	// "" (the sandbox's default user, as for exec).
	user string
	q    url.Values
}

// opts are the agent options the query asks for.
func (fq fileQuery) opts() []agentclient.FileOption {
	return []agentclient.FileOption{agentclient.AsUser(fq.user)}
}

// details are the audit details of the request.
func (fq fileQuery) details() map[string]any {
	d := map[string]any{"path": fq.path}
	if fq.user != "" {
		d["user"] = fq.user
	}
	return d
}

// fileParams parses the query of a file route: path (required unless
// def is given, which replaces an empty one), user, and the optional
// parameters extra.
//
// A file request acts with the permissions of its user inside the
// sandbox, as exec does; user=root needs no scope beyond files, as
// exec's root needs none beyond exec: root inside the sandbox holds no
// privilege over the host or other sandboxes, and a key that may write
// files could as well have a command run that writes as root (see
// docs/SECURITY.md, File operations).
func fileParams(c *call, def string, extra ...string) (fileQuery, error) {
	q, err := parseQuery(c.r.URL.RawQuery, append([]string{"path", "user"}, extra...)...)
	if err != nil {
		return fileQuery{}, err
	}
	fq := fileQuery{path: q.Get("path"), user: q.Get("user"), q: q}
	if fq.path == "" {
		fq.path = def
	}
	if err := checkPath(fq.path); err != nil {
		return fileQuery{}, err
	}
	switch fq.user {
	case "", "user", "root":
	default:
		return fileQuery{}, invalidf("user must be \"user\" or \"root\"")
	}
	return fq, nil
}

// hashReader hashes and counts what it reads and keeps the first read
// error (to tell a client's failure from the sandbox's).
type hashReader struct {
	r   io.Reader
	h   hash.Hash
	n   int64
	err error
}

func (hr *hashReader) Read(p []byte) (int, error) {
	n, err := hr.r.Read(p)
	hr.h.Write(p[:n])
	hr.n += int64(n)
	if err != nil && err != io.EOF && hr.err == nil {
		hr.err = err
	}
	return n, err
}

// writeFile serves PUT /v1/sandboxes/{id}/files?path=P: the raw body is
// streamed into the file (parents are created), never held in memory
// whole. The file is replaced atomically once the body is complete; a body
// that fails midway leaves the old file as it was.
func (h *Handler) writeFile(c *call) error {
	sb, err := c.agentSandbox()
	if err != nil {
		return err
	}
	fq, err := fileParams(c, "")
	if err != nil {
		return err
	}
	c.ev.Details = fq.details()
	if c.r.ContentLength > h.lim.MaxFileBytes {
		return &http.MaxBytesError{Limit: h.lim.MaxFileBytes}
	}
	if err := c.begin(); err != nil {
		return err
	}
	body := c.idleBody(http.MaxBytesReader(c.w, c.r.Body, h.lim.MaxFileBytes))
	defer body.done()
	hr := &hashReader{r: body, h: sha256.New()}
	ctx, span := tracing.Start(c.r.Context(), "sandbox.file.upload", tracing.KeySandbox.String(sb.ID))
	info, err := h.mgr.WriteFile(ctx, sb.ID, fq.path, hr, agentclient.WriteOptions{MakeParents: true, User: fq.user})
	span.SetAttributes(tracing.KeyFileBytes.Int64(hr.n))
	tracing.End(span, err)
	body.done()
	if err != nil {
		if hr.err != nil {
			return bodyErr(hr.err)
		}
		return err
	}
	sum := hex.EncodeToString(hr.h.Sum(nil))
	c.ev.Details["size"] = hr.n
	c.ev.Details["sha256"] = sum
	if err := c.commit(); err != nil {
		return err
	}
	return c.json(http.StatusOK, wire.FileWriteResult{FileEntry: toEntryJSON(info), SHA256: sum})
}

// readFile serves GET (and HEAD) /v1/sandboxes/{id}/files?path=P: the file
// is streamed as application/octet-stream without a Content-Length (it
// may change while being read). An error before the first byte is a JSON
// error; one after it cuts the connection, so the client sees a broken
// transfer, never a short file that looks complete.
func (h *Handler) readFile(c *call) error {
	sb, err := c.agentSandbox()
	if err != nil {
		return err
	}
	fq, err := fileParams(c, "")
	if err != nil {
		return err
	}
	info, err := h.mgr.Stat(c.r.Context(), sb.ID, fq.path, fq.opts()...)
	if err != nil {
		return err
	}
	if info.Type == agentclient.FileTypeDir {
		return invalidf("%s is a directory; list it with files/list", clean(truncate(info.Path, 256)))
	}
	hdr := c.w.Header()
	hdr.Set("Content-Type", "application/octet-stream")
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Content-Type-Options", "nosniff")
	if c.r.Method == http.MethodHead {
		if info.Type == agentclient.FileTypeFile {
			hdr.Set("Content-Length", strconv.FormatInt(info.Size, 10))
		}
		c.w.WriteHeader(http.StatusOK)
		return nil
	}
	dw := &deadlineWriter{w: c.w, rc: http.NewResponseController(c.w), idle: h.lim.WriteIdleTimeout}
	defer dw.done()
	ctx, span := tracing.Start(c.r.Context(), "sandbox.file.download", tracing.KeySandbox.String(sb.ID))
	_, err = h.mgr.ReadFile(ctx, sb.ID, fq.path, dw, fq.opts()...)
	span.SetAttributes(tracing.KeyFileBytes.Int64(dw.n))
	tracing.End(span, err)
	if err != nil {
		return err
	}
	if !c.w.started() {
		c.w.WriteHeader(http.StatusOK)
	}
	return nil
}

// deadlineWriter sets an idle write deadline before each write.
type deadlineWriter struct {
	w      io.Writer
	rc     *http.ResponseController
	idle   time.Duration
	failed bool
	n      int64 // bytes written
}

func (d *deadlineWriter) Write(p []byte) (int, error) {
	_ = d.rc.SetWriteDeadline(time.Now().Add(d.idle))
	n, err := d.w.Write(p)
	d.n += int64(n)
	if err != nil && !d.failed {
		d.failed = true
		// Whatever net/http still tries to write fails at once.
		_ = d.rc.SetWriteDeadline(aLongTimeAgo)
	}
	return n, err
}

// done clears the deadline, unless a write failed.
func (d *deadlineWriter) done() {
	if !d.failed {
		_ = d.rc.SetWriteDeadline(time.Time{})
	}
}

// removeFile serves DELETE /v1/sandboxes/{id}/files?path=P&recursive=B.
func (h *Handler) removeFile(c *call) error {
	sb, err := c.agentSandbox()
	if err != nil {
		return err
	}
	fq, err := fileParams(c, "", "recursive")
	if err != nil {
		return err
	}
	recursive := false
	if v := fq.q.Get("recursive"); v != "" {
		if recursive, err = strconv.ParseBool(v); err != nil {
			return invalidf("recursive must be true or false")
		}
	}
	c.ev.Details = fq.details()
	c.ev.Details["recursive"] = recursive
	if err := c.begin(); err != nil {
		return err
	}
	if err := h.mgr.Remove(c.r.Context(), sb.ID, fq.path, recursive, fq.opts()...); err != nil {
		return err
	}
	if err := c.commit(); err != nil {
		return err
	}
	c.w.WriteHeader(http.StatusNoContent)
	return nil
}

// makeDir serves POST /v1/sandboxes/{id}/files/mkdir?path=P: the
// directory is created with its missing parents, like mkdir -p (an
// existing directory is not an error), and its entry returned.
func (h *Handler) makeDir(c *call) error {
	sb, err := c.agentSandbox()
	if err != nil {
		return err
	}
	fq, err := fileParams(c, "")
	if err != nil {
		return err
	}
	c.ev.Details = fq.details()
	if err := c.begin(); err != nil {
		return err
	}
	info, err := h.mgr.MakeDir(c.r.Context(), sb.ID, fq.path, true, fq.opts()...)
	if err != nil {
		return err
	}
	if err := c.commit(); err != nil {
		return err
	}
	return c.json(http.StatusOK, toEntryJSON(info))
}

// listDir serves GET /v1/sandboxes/{id}/files/list?path=P&depth=N. The
// path defaults to the user's home and depth to 1 (the entries of the
// directory only).
func (h *Handler) listDir(c *call) error {
	sb, err := c.agentSandbox()
	if err != nil {
		return err
	}
	fq, err := fileParams(c, ".", "depth")
	if err != nil {
		return err
	}
	depth, err := parseDepth(fq.q.Get("depth"))
	if err != nil {
		return err
	}
	entries, truncated, err := h.mgr.ListDir(c.r.Context(), sb.ID, fq.path, depth, fq.opts()...)
	if err != nil {
		return err
	}
	out := wire.DirListing{Entries: make([]wire.FileEntry, 0, len(entries)), Truncated: truncated}
	for i := range entries {
		out.Entries = append(out.Entries, toEntryJSON(&entries[i]))
	}
	return c.json(http.StatusOK, out)
}

// statFile serves GET /v1/sandboxes/{id}/files/stat?path=P: the entry at
// P (a symlink itself, not its target).
func (h *Handler) statFile(c *call) error {
	sb, err := c.agentSandbox()
	if err != nil {
		return err
	}
	fq, err := fileParams(c, "")
	if err != nil {
		return err
	}
	info, err := h.mgr.Stat(c.r.Context(), sb.ID, fq.path, fq.opts()...)
	if err != nil {
		return err
	}
	return c.json(http.StatusOK, toEntryJSON(info))
}

// watchFile serves GET /v1/sandboxes/{id}/files/watch?path=P&recursive=B:
// a start line once the watch is in place, then a line per change under
// the directory P (with recursive, its subdirectories too), until the
// client goes, the watch ends (an error line says why) or
// Limits.MaxExecTimeout passes.
func (h *Handler) watchFile(c *call) error {
	sb, err := c.agentSandbox()
	if err != nil {
		return err
	}
	fq, err := fileParams(c, ".", "recursive")
	if err != nil {
		return err
	}
	recursive := false
	switch fq.q.Get("recursive") {
	case "", "false", "0":
	case "true", "1":
		recursive = true
	default:
		return invalidf("recursive must be true or false")
	}
	release, err := c.admit(sb.ID, streamCost)
	if err != nil {
		return err
	}
	defer release()
	ctx, cancel := context.WithTimeout(c.r.Context(), h.lim.MaxExecTimeout)
	defer cancel()
	ch, err := h.mgr.WatchDir(ctx, sb.ID, fq.path, recursive, fq.opts()...)
	if err != nil {
		return err
	}
	nw := &ndjsonWriter{c: c, rc: http.NewResponseController(c.w), idle: h.lim.WriteIdleTimeout, onFail: cancel}
	defer nw.done()
	if err := nw.writeLine(wire.WatchStart{Type: wire.WatchStarted}); err != nil {
		return nil
	}
	for ev := range ch {
		if ev.Err != nil {
			nw.endWithError(ev.Err)
			break
		}
		if nw.writeLine(wire.WatchEvent{Type: wire.WatchChanged, Path: ev.Path, Op: string(ev.Op)}) != nil {
			break
		}
	}
	cancel()
	for range ch { // drained as the watch ends
	}
	nw.abortIfFailed()
	return nil
}

// ActionFileMove is the audit action of a rename: its record names the
// source (path) and the destination (to).
const ActionFileMove = "file.move"

// moveFile serves POST /v1/sandboxes/{id}/files/move?path=P&to=Q: P is
// renamed to Q (an existing Q that is a file is replaced, as rename(2)
// does), with the user's permissions.
func (h *Handler) moveFile(c *call) error {
	sb, err := c.agentSandbox()
	if err != nil {
		return err
	}
	fq, err := fileParams(c, "", "to")
	if err != nil {
		return err
	}
	to := fq.q.Get("to")
	if to == "" {
		return invalidf("to (the new path) is required")
	}
	if err := checkPath(to); err != nil {
		return err
	}
	c.ev.Details = fq.details()
	c.ev.Details["to"] = to
	if err := c.begin(); err != nil {
		return err
	}
	info, err := h.mgr.Move(c.r.Context(), sb.ID, fq.path, to, fq.opts()...)
	if err != nil {
		return err
	}
	if err := c.commit(); err != nil {
		return err
	}
	return c.json(http.StatusOK, toEntryJSON(info))
}

// parseDepth parses the depth parameter: empty means 1.
func parseDepth(s string) (int, error) {
	if s == "" {
		return 1, nil
	}
	d, err := strconv.Atoi(s)
	if err != nil || d < 1 || d > maxListDepth {
		return 0, invalidf("depth must be an integer from 1 to %d", maxListDepth)
	}
	return d, nil
}
