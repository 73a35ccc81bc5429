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

// The code interpreter against the real server is tested in internal/api
// and internal/e2e; these tests cover stream handling a real server does
// not easily produce.

func TestRunCodeStream(t *testing.T) {
	const end = `{"type":"end","context_id":"ctx-a","language":"python","execution_count":2,"status":"error","exit_code":0,"duration_ms":5}`
	tests := []struct {
		name    string
		body    string
		events  string
		want    error
		stdout  string
		results int
	}{
		{"full", `{"type":"stdout","data":"a"}` + "\n" + `{"type":"stderr","data":"b"}` + "\n" +
			`{"type":"result","is_main_result":true,"text":"1","png":"iVBO"}` + "\n" +
			`{"type":"error","name":"E","value":"v","traceback":"tb"}` + "\n" + `{"type":"future"}` + "\n" + end + "\n",
			"stdout:a|stderr:b|result:1|error:E: v", nil, "a", 1},
		{"broken stream", `{"type":"stdout","data":"a"}` + "\n" + `{"type":"error","error":{"code":"unavailable","message":"gone"}}` + "\n",
			"stdout:a", ErrUnavailable, "", 0},
		{"no end", `{"type":"stdout","data":"a"}` + "\n", "stdout:a", ErrUnavailable, "", 0},
		{"malformed", "{\n", "", nil, "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := serve(t, func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/prefix/v1/sandboxes/sb-x/code" || r.Header.Get("Accept") != "application/x-ndjson" {
					t.Errorf("request %s %v", r.URL.Path, r.Header)
				}
				b, _ := io.ReadAll(r.Body)
				if string(b) != `{"language":"python","code":"1","timeout_s":2}` {
					t.Errorf("body %s", b)
				}
				_, _ = io.WriteString(w, tt.body)
			})
			var got []string
			x, err := c.RunCodeStream(context.Background(), "sb-x", RunCodeRequest{Language: "python", Code: "1", Timeout: 1500 * time.Millisecond},
				func(ev CodeEvent) error {
					switch ev.Type {
					case "stdout", "stderr":
						got = append(got, ev.Type+":"+ev.Data)
					case "result":
						got = append(got, "result:"+ev.Result.Text)
					case "error":
						got = append(got, "error:"+ev.Error.String())
					}
					return nil
				})
			if strings.Join(got, "|") != tt.events {
				t.Errorf("events %q, want %q", got, tt.events)
			}
			if tt.name == "malformed" {
				if err == nil {
					t.Error("a malformed line was accepted")
				}
				return
			}
			if tt.want != nil {
				if !errors.Is(err, tt.want) {
					t.Errorf("err %v, want %v", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if x.Stdout != tt.stdout || len(x.Results) != tt.results || x.Status != CodeStatusError || x.ExecutionCount != 2 ||
				x.Error == nil || x.Error.Traceback != "tb" || string(x.Results[0].PNG) != "\x89\x50\x4e" || x.MainResult().Text != "1" {
				t.Errorf("execution %+v", x)
			}
		})
	}
}

func TestRunCodeStreamCallbackError(t *testing.T) {
	c := serve(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"type":"stdout","data":"a"}`+"\n")
	})
	stop := errors.New("stop")
	if _, err := c.RunCodeStream(context.Background(), "sb-x", RunCodeRequest{Language: "bash"}, func(CodeEvent) error { return stop }); !errors.Is(err, stop) {
		t.Errorf("err %v", err)
	}
}

func TestCodeRequestChecks(t *testing.T) {
	c := serve(t, func(w http.ResponseWriter, r *http.Request) { t.Errorf("request sent: %s", r.URL) })
	ctx := context.Background()
	if _, err := c.RunCode(ctx, "sb-x", RunCodeRequest{Code: "1"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("no language: %v", err)
	}
	if _, err := c.RunCode(ctx, "sb-x", RunCodeRequest{ContextID: "a/b"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad context: %v", err)
	}
	if err := c.DeleteCodeContext(ctx, "sb-x", ""); !errors.Is(err, ErrInvalid) {
		t.Errorf("empty context: %v", err)
	}
	if _, err := c.ListCodeContexts(ctx, ""); !errors.Is(err, ErrInvalid) {
		t.Errorf("empty sandbox: %v", err)
	}
}
