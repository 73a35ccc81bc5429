package mcp

import (
	"errors"
	"io"
	"net/http"
	"time"
)

// bodyTimeout bounds how long an MCP request's body may take to arrive.
// /mcp is served beside the API on its listener but outside the API's
// handler, whose guard against slow bodies it therefore does not get: a
// client that sends headers and then trickles or stalls its body would
// hold its connection and goroutine for ever. A JSON-RPC message is at
// most maxBody, so this is generous.
var bodyTimeout = 30 * time.Second

// bodyDeadline sets a read deadline of bodyTimeout on requests with a
// body and clears it once the body is consumed (at its end, an error or
// Close): a deadline left in place would also end net/http's background
// read of the connection, and with it the request's context, which must
// live as long as a tool call or an SSE stream does.
func bodyDeadline(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			next.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		if rc.SetReadDeadline(time.Now().Add(bodyTimeout)) != nil {
			next.ServeHTTP(w, r)
			return
		}
		b := &deadlineBody{ReadCloser: r.Body, rc: rc, hdr: w.Header()}
		defer b.clear()
		r.Body = b
		next.ServeHTTP(w, r)
	})
}

// deadlineBody clears its connection's read deadline once read to its
// end or closed.
type deadlineBody struct {
	io.ReadCloser
	rc      *http.ResponseController
	hdr     http.Header
	cleared bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		var ne interface{ Timeout() bool }
		if errors.As(err, &ne) && ne.Timeout() {
			// The connection cannot be read on: answer and close it.
			b.hdr.Set("Connection", "close")
			return n, err
		}
		b.clear()
	}
	return n, err
}

func (b *deadlineBody) Close() error {
	b.clear()
	return b.ReadCloser.Close()
}

func (b *deadlineBody) clear() {
	if !b.cleared {
		b.cleared = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
}
