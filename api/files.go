package api

import (
	"encoding/json"
	"time"
)

// FileEntry describes a file or directory in a sandbox: the body of
// POST .../files/mkdir and the entries of a DirListing.
type FileEntry struct {
	// Name is the entry's base name.
	Name string `json:"name"`
	// Path is the absolute path inside the sandbox.
	Path string `json:"path"`
	// Type is "file", "dir", "symlink" or "other".
	Type string `json:"type"`
	// Size is the size in bytes.
	Size int64 `json:"size"`
	// Mode holds the Unix permission bits, with setuid (04000), setgid
	// (02000) and sticky (01000).
	Mode uint32 `json:"mode"`
	// UID and GID own the entry, as the sandbox numbers them.
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
	// ModTime is the time of the last modification.
	ModTime time.Time `json:"mod_time"`
	// SymlinkTarget is a symlink's target; absent for other types.
	SymlinkTarget string `json:"symlink_target,omitempty"`
}

// FileWriteResult is the body of a successful PUT .../files: the new
// file's entry and the SHA-256 of the bytes the server received.
type FileWriteResult struct {
	FileEntry
	// SHA256 is the hex SHA-256 of the bytes written.
	SHA256 string `json:"sha256"`
}

// DirListing is the body of GET .../files/list.
type DirListing struct {
	// Entries are the directory's entries, to the depth asked for.
	Entries []FileEntry `json:"entries"`
	// Truncated reports that the server's entry cap was hit.
	Truncated bool `json:"truncated"`
}

// The types of the lines of a watch (WatchStreamLine.Type).
const (
	WatchStarted = "start" // the watch is in place
	WatchChanged = "event" // something changed
)

// The changes a watch reports (WatchEvent.Op).
const (
	WatchCreate = "create"
	WatchWrite  = "write"
	WatchRemove = "remove"
	WatchRename = "rename"
	WatchChmod  = "chmod"
)

// WatchStart is the first line of GET /v1/sandboxes/{id}/files/watch:
// the watch is in place.
type WatchStart struct {
	// Type is "start".
	Type string `json:"type"`
}

// WatchEvent is a change under a watched directory.
type WatchEvent struct {
	// Type is "event".
	Type string `json:"type"`
	// Path is the absolute path that changed.
	Path string `json:"path"`
	// Op is one of the Watch* changes.
	Op string `json:"op"`
}

// WatchStreamLine is any line of a watch, for a reader: Type says which
// of WatchStart ("start"), WatchEvent ("event") and StreamError
// ("error") it is.
type WatchStreamLine struct {
	Type  string          `json:"type"`
	Path  string          `json:"path"`
	Op    string          `json:"op"`
	Error json.RawMessage `json:"error"`
}
