package api

import (
	"encoding/json"
	"time"
)

// PtyResize is the one control message a client sends on a PTY
// WebSocket (GET /v1/sandboxes/{id}/pty), as a text frame. Its fields are
// in the order clients have always sent them.
type PtyResize struct {
	// Cols and Rows are the new terminal size, 1 to 1000 each.
	Cols int `json:"cols"`
	Rows int `json:"rows"`
	// Type is "resize".
	Type string `json:"type"`
}

// PtyExit is the server's last text frame of a PTY session whose process
// ended.
type PtyExit struct {
	// Type is "exit".
	Type string `json:"type"`
	// Status is one of the Status constants.
	Status     string `json:"status"`
	ExitCode   int    `json:"exit_code"`
	Signal     int    `json:"signal"`
	DurationMS int64  `json:"duration_ms"`
	// Error says why the process could not be started, if it could not.
	Error string `json:"error,omitempty"`
}

// PtyFrame is any text frame from the server, for a reader: a PtyExit
// (Type "exit") or a StreamError (Type "error"). Error is the exit
// frame's string or the error frame's object, as JSON.
type PtyFrame struct {
	PtyExit
	Error json.RawMessage `json:"error"`
}

// PTYToken is the answer of POST /v1/sandboxes/{id}/pty/token: a
// single-use credential that opens the sandbox's PTY without the API key.
type PTYToken struct {
	// Token is the credential until it is used or expires: keep it out of
	// logs.
	Token string `json:"token"`
	// ExpiresAt is when it expires if unused.
	ExpiresAt time.Time `json:"expires_at"`
	// URL is the PTY route with the token, relative to the server: what a
	// browser opens (ws:// or wss:// and the server's host in front),
	// adding cols, rows, cmd and user as it wishes.
	URL string `json:"url"`
}
