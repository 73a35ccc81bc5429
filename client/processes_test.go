package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestProcessesRequests: what the process methods send, and what they
// refuse before sending anything.
func TestProcessesRequests(t *testing.T) {
	ctx := context.Background()
	var got []string
	c := serve(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, r.Method+" "+r.URL.Path+" "+strings.TrimSpace(string(b)))
		switch {
		case strings.HasSuffix(r.URL.Path, "/signal"):
			w.WriteHeader(http.StatusNoContent)
		case strings.HasSuffix(r.URL.Path, "/kill"):
			io.WriteString(w, `{"killed":3}`)
		case strings.HasSuffix(r.URL.Path, "/output"):
			if r.Header.Get("Accept") != "application/x-ndjson" {
				t.Errorf("output Accept %q", r.Header.Get("Accept"))
			}
			io.WriteString(w, `{"type":"stdout","data":"hi"}`+"\n"+`{"type":"exit","status":"killed","exit_code":-1,"signal":9}`+"\n")
		default:
			io.WriteString(w, `{"processes":[{"pid":5,"ppid":1,"cmd":["sleep","9"],"name":"sleep","uid":1000,"user":"user",`+
				`"state":"sleeping","cgroup":"/work/c2","session":4,"started_at":"2026-01-02T03:04:05Z","started_by_agent":true,"tag":"t","background":true}],"total":7,"truncated":true}`)
		}
	})
	l, err := c.ListProcesses(ctx, "sb-x")
	if err != nil || l.Total != 7 || !l.Truncated || len(l.Processes) != 1 {
		t.Fatalf("ListProcesses = %+v, %v", l, err)
	}
	p := l.Processes[0]
	if p.PID != 5 || p.PPID != 1 || p.Cmd[1] != "9" || p.User != "user" || p.Cgroup != "/work/c2" || p.Session != 4 ||
		!p.StartedByAgent || p.Tag != "t" || !p.Background || p.StartedAt.Year() != 2026 {
		t.Errorf("process %+v", p)
	}
	if err := c.SignalProcess(ctx, "sb-x", 5, "TERM"); err != nil {
		t.Fatal(err)
	}
	if n, err := c.KillAllProcesses(ctx, "sb-x", 1500*time.Millisecond); err != nil || n != 3 {
		t.Fatalf("KillAllProcesses = %d, %v", n, err)
	}
	var out strings.Builder
	res, err := c.FollowProcess(ctx, "sb-x", 5, func(s Stream, b []byte) error { out.Write(b); return nil })
	if err != nil || res.Status != StatusKilled || res.Signal != 9 || out.String() != "hi" {
		t.Errorf("FollowProcess = %+v, %v, %q", res, err, out.String())
	}
	want := []string{
		"GET /prefix/v1/sandboxes/sb-x/processes ",
		`POST /prefix/v1/sandboxes/sb-x/processes/5/signal {"signal":"TERM"}`,
		`POST /prefix/v1/sandboxes/sb-x/processes/kill {"timeout_s":2}`,
		"GET /prefix/v1/sandboxes/sb-x/processes/5/output ",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	got = nil
	for name, err := range map[string]error{
		"pid 0":     c.SignalProcess(ctx, "sb-x", 0, "TERM"),
		"no signal": c.SignalProcess(ctx, "sb-x", 5, ""),
		"bad id":    c.SignalProcess(ctx, "a/b", 5, "TERM"),
		"wait":      func() error { _, err := c.KillAllProcesses(ctx, "sb-x", 2*time.Minute); return err }(),
		"follow":    func() error { _, err := c.FollowProcess(ctx, "sb-x", -1, nil); return err }(),
		"list":      func() error { _, err := c.ListProcesses(ctx, ""); return err }(),
	} {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if len(got) != 0 {
		t.Errorf("invalid calls sent %v", got)
	}
	// Without a timeout the body is empty.
	if _, err := c.KillAllProcesses(ctx, "sb-x", 0); err != nil || len(got) != 1 || !strings.HasSuffix(got[0], " {}") {
		t.Errorf("kill-all without a wait sent %v, %v", got, err)
	}
}
