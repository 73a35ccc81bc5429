package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The client against the real server is tested in internal/api; these
// tests cover what a real server does not easily produce.

func TestNew(t *testing.T) {
	tests := []struct {
		url, key string
		ok       bool
	}{
		{"http://127.0.0.1:7070", "k", true},
		{"https://airlock.example/base/", "k", true},
		{"ftp://x", "k", false},
		{"127.0.0.1:7070", "k", false},
		{"http://x?q=1", "k", false},
		{"http://x", "", false},
		{"http://x", "a b", false},
	}
	for _, tt := range tests {
		_, err := New(tt.url, tt.key)
		if (err == nil) != tt.ok {
			t.Errorf("New(%q, %q) = %v, want ok=%v", tt.url, tt.key, err, tt.ok)
		}
	}
}

func serve(t *testing.T, h http.HandlerFunc) *Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, err := New(srv.URL+"/prefix", "key", WithHTTPClient(srv.Client()), WithMaxResponseBytes(1<<10))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestErrors(t *testing.T) {
	tests := []struct {
		status int
		body   string
		want   error
		code   string
	}{
		{404, `{"error":{"code":"not_found","message":"sandbox x: not found"}}`, ErrNotFound, "not_found"},
		{401, `{"error":{"code":"unauthenticated","message":"invalid API key"}}`, ErrUnauthorized, "unauthenticated"},
		{403, `{"error":{"code":"permission_denied","message":"scope"}}`, ErrForbidden, "permission_denied"},
		{429, `{"error":{"code":"rate_limited","message":"slow down"}}`, ErrRateLimited, "rate_limited"},
		{429, `{"error":{"code":"resource_exhausted","message":"quota"}}`, ErrQuotaExceeded, "resource_exhausted"},
		{409, `{"error":{"code":"failed_precondition","message":"stopped"}}`, ErrConflict, "failed_precondition"},
		{413, `{"error":{"code":"request_too_large","message":"big"}}`, ErrTooLarge, "request_too_large"},
		{502, `<html>bad gateway</html>`, ErrInternal, ""},
		{503, ``, ErrUnavailable, ""},
		{418, `{"error":{"code":"brand_new_code","message":"?"}}`, ErrInvalid, "brand_new_code"},
	}
	for _, tt := range tests {
		c := serve(t, func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer key" || !strings.HasPrefix(r.URL.Path, "/prefix/v1/sandboxes/") {
				t.Errorf("request %s %v", r.URL.Path, r.Header)
			}
			w.WriteHeader(tt.status)
			io.WriteString(w, tt.body)
		})
		_, err := c.GetSandbox(context.Background(), "sb-x")
		var ae *APIError
		if !errors.Is(err, tt.want) || !errors.As(err, &ae) || ae.Status != tt.status || ae.Code != tt.code {
			t.Errorf("status %d body %q: err %v, want %v with code %q", tt.status, tt.body, err, tt.want, tt.code)
		}
		if errors.Is(err, ErrTimeout) && tt.want != ErrTimeout {
			t.Errorf("%v matches an unrelated sentinel", err)
		}
	}
}

func TestResponseCap(t *testing.T) {
	c := serve(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"id":"sb-x","metadata":{"k":"`+strings.Repeat("v", 2000)+`"}}`)
	})
	if _, err := c.GetSandbox(context.Background(), "sb-x"); !errors.Is(err, ErrResponseTooLarge) {
		t.Errorf("oversize response: %v, want ErrResponseTooLarge", err)
	}
}

func TestExecStreamParsing(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name  string
		body  string
		out   string
		check func(*ExecResult, error) bool
	}{
		{"ok", `{"type":"stdout","data":"a"}` + "\n" + `{"type":"stderr","data_b64":"/w=="}` + "\n" +
			`{"type":"exit","status":"error","exit_code":127,"error":"not found","duration_ms":5}` + "\n", "a\xff",
			func(r *ExecResult, err error) bool {
				return err == nil && r.ExitCode == 127 && r.Error == "not found" && r.Duration.Milliseconds() == 5
			}},
		{"error line", `{"type":"stdout","data":"x"}` + "\n" + `{"type":"error","error":{"code":"unavailable","message":"gone"}}` + "\n", "x",
			func(r *ExecResult, err error) bool { return errors.Is(err, ErrUnavailable) }},
		{"no exit", `{"type":"stdout","data":"x"}` + "\n", "x",
			func(r *ExecResult, err error) bool { return errors.Is(err, ErrUnavailable) }},
		{"garbage", "not json\n", "",
			func(r *ExecResult, err error) bool { return err != nil && r == nil }},
		{"line too long", `{"type":"stdout","data":"` + strings.Repeat("x", 2<<20) + `"}` + "\n", "",
			func(r *ExecResult, err error) bool { return errors.Is(err, ErrResponseTooLarge) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := serve(t, func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("Accept") != "application/x-ndjson" {
					t.Errorf("Accept %q", r.Header.Get("Accept"))
				}
				w.Header().Set("Content-Type", "application/x-ndjson")
				io.WriteString(w, tt.body)
			})
			var out strings.Builder
			res, err := c.ExecStream(ctx, "sb-x", ExecRequest{Command: "x"}, func(s Stream, b []byte) error {
				out.Write(b)
				return nil
			})
			if !tt.check(res, err) || out.String() != tt.out {
				t.Errorf("result %+v, err %v, output %q", res, err, out.String())
			}
		})
	}
	// A callback error aborts.
	c := serve(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"type":"stdout","data":"x"}`+"\n"+`{"type":"exit","status":"success"}`+"\n")
	})
	stop := errors.New("stop")
	if _, err := c.ExecStream(ctx, "sb-x", ExecRequest{Command: "x"}, func(Stream, []byte) error { return stop }); err != stop {
		t.Errorf("callback error: %v", err)
	}
}

func TestRequestValidation(t *testing.T) {
	c := serve(t, func(w http.ResponseWriter, r *http.Request) { t.Errorf("unexpected request %s", r.URL) })
	ctx := context.Background()
	if _, err := c.Exec(ctx, "sb-x", ExecRequest{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("exec without a command: %v", err)
	}
	if _, err := c.Exec(ctx, "sb-x", ExecRequest{Cmd: []string{"a"}, Command: "b"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("exec with both: %v", err)
	}
	for _, id := range []string{"", "a/b", "a?b"} {
		if _, err := c.GetSandbox(ctx, id); !errors.Is(err, ErrInvalid) {
			t.Errorf("GetSandbox(%q): %v", id, err)
		}
	}
	if _, err := c.ReadFile(ctx, "sb-x", ""); !errors.Is(err, ErrInvalid) {
		t.Errorf("ReadFile without a path: %v", err)
	}
}
