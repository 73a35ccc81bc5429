package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/airlock-sandbox/airlock/api"
)

// FileInfo describes a file or directory in a sandbox: the wire forms
// api.FileEntry and, for WriteFile, api.FileWriteResult in one.
type FileInfo struct {
	Name string `json:"name"`
	// Path is the absolute path inside the sandbox.
	Path string `json:"path"`
	// Type is "file", "dir", "symlink" or "other".
	Type string `json:"type"`
	Size int64  `json:"size"`
	// Mode holds the Unix permission bits, with setuid (04000), setgid
	// (02000) and sticky (01000).
	Mode          uint32    `json:"mode"`
	UID           uint32    `json:"uid"`
	GID           uint32    `json:"gid"`
	ModTime       time.Time `json:"mod_time"`
	SymlinkTarget string    `json:"symlink_target,omitempty"`
	// SHA256 is the hex SHA-256 of the bytes the server received
	// (WriteFile only).
	SHA256 string `json:"sha256,omitempty"`
}

// fileInfo is the FileInfo of the wire form e, with sha256 the hex
// SHA-256 of a write ("" otherwise).
func fileInfo(e *api.FileEntry, sha256 string) FileInfo {
	return FileInfo{Name: e.Name, Path: e.Path, Type: e.Type, Size: e.Size, Mode: e.Mode, UID: e.UID, GID: e.GID,
		ModTime: e.ModTime, SymlinkTarget: e.SymlinkTarget, SHA256: sha256}
}

// FileOption tunes a file request.
type FileOption func(url.Values)

// AsUser makes a file request act as user: "user" or "root". Without it
// the request acts as the sandbox's default user (user, or the template's
// USER), like a command run without a user. The sandbox performs the
// request with that user's permissions, as a command of that user would:
// the default user cannot write /etc/passwd or read /root, and what a
// request creates belongs to its user. It needs no scope beyond files.
func AsUser(user string) FileOption {
	return func(q url.Values) {
		if user != "" {
			q.Set("user", user)
		}
	}
}

// fileQuery is the query of a file request for path with opts.
func fileQuery(path string, opts []FileOption) url.Values {
	q := url.Values{}
	if path != "" {
		q.Set("path", path)
	}
	for _, o := range opts {
		o(q)
	}
	return q
}

func checkPath(path string) error {
	if path == "" {
		return fmt.Errorf("airlock: file path is empty: %w", ErrInvalid)
	}
	return nil
}

// WriteFile streams r into the file at path in sandbox id (relative paths
// are relative to the user's home), creating parent directories. The file
// is replaced once the whole content has arrived; if r fails or ctx ends
// first, the old file is left as it was. r is read as the request is
// sent, never buffered whole. When r is a *bytes.Reader, *bytes.Buffer or
// *strings.Reader its length is sent ahead, otherwise the body is
// chunked. The write acts as the sandbox's default user unless opts name
// another (AsUser): a new file belongs to that user, and a file that user
// may not write is refused.
func (c *Client) WriteFile(ctx context.Context, id, path string, r io.Reader, opts ...FileOption) (*FileInfo, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	if err := checkPath(path); err != nil {
		return nil, err
	}
	if r == nil {
		r = http.NoBody
	}
	req, err := c.newRequest(ctx, http.MethodPut, sandboxPath(id, "/files"), fileQuery(path, opts), r)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := c.send(req, http.StatusOK)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out api.FileWriteResult
	if err := c.decodeBody(resp, &out); err != nil {
		return nil, err
	}
	fi := fileInfo(&out.FileEntry, out.SHA256)
	return &fi, nil
}

// ReadFile opens the file at path in sandbox id for streaming. The caller
// must close the reader. A transfer that breaks midway makes Read fail
// (io.ErrUnexpectedEOF), so a short file is never mistaken for a whole
// one.
func (c *Client) ReadFile(ctx context.Context, id, path string, opts ...FileOption) (io.ReadCloser, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	if err := checkPath(path); err != nil {
		return nil, err
	}
	req, err := c.newRequest(ctx, http.MethodGet, sandboxPath(id, "/files"), fileQuery(path, opts), nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.send(req, http.StatusOK)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// RemoveFile deletes the file, symlink or (with recursive) directory tree
// at path in sandbox id.
func (c *Client) RemoveFile(ctx context.Context, id, path string, recursive bool, opts ...FileOption) error {
	if err := checkID(id); err != nil {
		return err
	}
	if err := checkPath(path); err != nil {
		return err
	}
	q := fileQuery(path, opts)
	if recursive {
		q.Set("recursive", "true")
	}
	return c.doJSON(ctx, http.MethodDelete, sandboxPath(id, "/files"), q, nil, nil, http.StatusNoContent)
}

// MakeDir creates the directory at path in sandbox id (relative paths
// are relative to the user's home) with its missing parents, like mkdir
// -p: an existing directory is not an error. It returns the directory's
// entry. It needs the files scope.
func (c *Client) MakeDir(ctx context.Context, id, path string, opts ...FileOption) (*FileInfo, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	if err := checkPath(path); err != nil {
		return nil, err
	}
	var out api.FileEntry
	if err := c.doJSON(ctx, http.MethodPost, sandboxPath(id, "/files/mkdir"), fileQuery(path, opts), nil, &out, http.StatusOK); err != nil {
		return nil, err
	}
	fi := fileInfo(&out, "")
	return &fi, nil
}

// ListDir lists the directory at path in sandbox id ("" for the user's
// home) to depth levels (0 or 1: its entries only; the server allows up to
// 32). truncated reports that the server's entry cap was hit.
func (c *Client) ListDir(ctx context.Context, id, path string, depth int, opts ...FileOption) (entries []FileInfo, truncated bool, err error) {
	if err := checkID(id); err != nil {
		return nil, false, err
	}
	q := fileQuery(path, opts)
	if depth > 1 {
		q.Set("depth", strconv.Itoa(depth))
	}
	var out api.DirListing
	if err := c.doJSON(ctx, http.MethodGet, sandboxPath(id, "/files/list"), q, nil, &out, http.StatusOK); err != nil {
		return nil, false, err
	}
	entries = make([]FileInfo, 0, len(out.Entries))
	for i := range out.Entries {
		entries = append(entries, fileInfo(&out.Entries[i], ""))
	}
	return entries, out.Truncated, nil
}

// StatFile describes the entry at path in sandbox id (a symlink itself,
// not its target); ErrNotFound when there is none.
func (c *Client) StatFile(ctx context.Context, id, path string, opts ...FileOption) (*FileInfo, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	if err := checkPath(path); err != nil {
		return nil, err
	}
	var out api.FileEntry
	if err := c.doJSON(ctx, http.MethodGet, sandboxPath(id, "/files/stat"), fileQuery(path, opts), nil, &out, http.StatusOK); err != nil {
		return nil, err
	}
	fi := fileInfo(&out, "")
	return &fi, nil
}

// MoveFile renames path to newPath in sandbox id (replacing a file at
// newPath, as rename(2) does) and describes it at its new path.
func (c *Client) MoveFile(ctx context.Context, id, path, newPath string, opts ...FileOption) (*FileInfo, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	if err := checkPath(path); err != nil {
		return nil, err
	}
	if err := checkPath(newPath); err != nil {
		return nil, err
	}
	q := fileQuery(path, opts)
	q.Set("to", newPath)
	var out api.FileEntry
	if err := c.doJSON(ctx, http.MethodPost, sandboxPath(id, "/files/move"), q, nil, &out, http.StatusOK); err != nil {
		return nil, err
	}
	fi := fileInfo(&out, "")
	return &fi, nil
}

// WatchEvent is a change under a watched directory: Op is "create",
// "write", "remove", "rename" or "chmod".
type WatchEvent = api.WatchEvent

// maxWatchLine caps one line of a watch.
const maxWatchLine = 64 << 10

// WatchDir watches the directory at path in sandbox id (with recursive,
// its subdirectories too): onStart is called once the watch is in place
// (nil: not called), then onEvent with each change, until ctx ends
// (WatchDir then returns ctx's error), onEvent fails (that error), or
// the server ends the watch.
func (c *Client) WatchDir(ctx context.Context, id, path string, recursive bool, onStart func(), onEvent func(WatchEvent) error, opts ...FileOption) error {
	if err := checkID(id); err != nil {
		return err
	}
	q := fileQuery(path, opts)
	if recursive {
		q.Set("recursive", "true")
	}
	req, err := c.newRequest(ctx, http.MethodGet, sandboxPath(id, "/files/watch"), q, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := c.send(req, http.StatusOK)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	err = readStream(resp.Body, "watch", maxWatchLine, func(line *api.WatchStreamLine) (bool, error) {
		switch line.Type {
		case api.WatchStarted:
			if onStart != nil {
				onStart()
			}
		case api.WatchChanged:
			return false, onEvent(api.WatchEvent{Type: line.Type, Path: line.Path, Op: line.Op})
		case "error":
			return true, streamError(parseErrorDetail(line.Error), "watch failed")
		}
		return false, nil
	})
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}
