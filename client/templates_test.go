package client

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestBuildStreamErrors(t *testing.T) {
	tests := []struct {
		name string
		body string
		want error
		msg  string
	}{
		{"error line", `{"type":"step","step":1,"steps":1}` + "\n" + `{"type":"error","error":{"code":"failed_precondition","message":"RUN exited with 1"}}` + "\n",
			ErrConflict, "RUN exited with 1"},
		{"cut short", `{"type":"step","step":1,"steps":1}` + "\n", ErrUnavailable, "ended without a result"},
		{"malformed", "{nope\n", nil, "malformed line"},
		{"done without template", `{"type":"done"}` + "\n", ErrInternal, "done without a template"},
		{"error line without detail", `{"type":"error"}` + "\n", ErrInternal, "the build failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := serve(t, func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("Accept") != "application/x-ndjson" || r.URL.Path != "/prefix/v1/templates" {
					t.Errorf("request %s %v", r.URL.Path, r.Header)
				}
				fmt.Fprint(w, tt.body)
			})
			_, err := c.BuildTemplate(context.Background(), BuildTemplateRequest{Name: "a", From: "x/y:1"}, nil)
			if err == nil || (tt.want != nil && !errors.Is(err, tt.want)) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("err = %v, want %v with %q", err, tt.want, tt.msg)
			}
		})
	}
}

func TestBuildEventsAndAbort(t *testing.T) {
	c := serve(t, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, `{"type":"step","step":1,"steps":2,"instruction":"FROM x"}`)
		fmt.Fprintln(w, `{"type":"progress","step":1,"steps":2,"layer":1,"layers":1,"done":5,"total":10}`)
		fmt.Fprintln(w, `{"type":"log","step":2,"steps":2,"text":"hi"}`)
		fmt.Fprintln(w, `{"type":"done","template":{"name":"a","layers":1,"layer_list":[{"digest":"sha256:x"}],"config":{"env":["A=1"]}}}`)
	})
	var got []BuildEvent
	tpl, err := c.BuildTemplate(context.Background(), BuildTemplateRequest{Name: "a", From: "x"}, func(ev BuildEvent) error {
		got = append(got, ev)
		return nil
	})
	if err != nil || tpl.Name != "a" || tpl.Config.Env[0] != "A=1" || len(tpl.LayerList) != 1 {
		t.Fatalf("BuildTemplate = %+v, %v", tpl, err)
	}
	if len(got) != 3 || got[1].Done != 5 || got[1].Total != 10 || got[2].Text != "hi" || got[0].Instruction != "FROM x" {
		t.Errorf("events %+v", got)
	}
	stop := errors.New("enough")
	_, err = c.BuildTemplate(context.Background(), BuildTemplateRequest{Name: "a", From: "x"}, func(BuildEvent) error { return stop })
	if !errors.Is(err, stop) {
		t.Errorf("aborting callback: %v", err)
	}
	for _, name := range []string{"", "a/b", "a?"} {
		if _, err := c.BuildTemplate(context.Background(), BuildTemplateRequest{Name: name}, nil); !errors.Is(err, ErrInvalid) {
			t.Errorf("name %q: %v", name, err)
		}
		if _, err := c.DeleteTemplate(context.Background(), name); !errors.Is(err, ErrInvalid) {
			t.Errorf("delete %q: %v", name, err)
		}
	}
}

// readTar lists a tar stream: name -> "dir", "link:T" or "MODE:content".
func readTar(t *testing.T, r io.Reader) map[string]string {
	t.Helper()
	out := map[string]string{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			out[h.Name] = "dir"
		case tar.TypeSymlink:
			out[h.Name] = "link:" + h.Linkname
		default:
			b, _ := io.ReadAll(tr)
			out[h.Name] = fmt.Sprintf("%o:%s", h.Mode, b)
		}
	}
}

func TestWriteContextTar(t *testing.T) {
	dir := t.TempDir()
	for p, body := range map[string]string{"Airfile": "FROM old", "a/b.txt": "bee", "sub/Airfile": "nested"} {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, p), []byte(body), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(filepath.Join(dir, "a/b.txt"), 0o755)
	os.Symlink("../a/b.txt", filepath.Join(dir, "sub/l"))
	os.Link(filepath.Join(dir, "a/b.txt"), filepath.Join(dir, "hard"))
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := writeContextTar(context.Background(), &buf, dir, []byte("FROM new\n")); err != nil {
		t.Fatal(err)
	}
	got := readTar(t, &buf)
	want := map[string]string{
		"Airfile": "644:FROM new\n", "a/": "dir", "a/b.txt": "755:bee", "hard": "755:bee",
		"sub/": "dir", "sub/Airfile": "640:nested", "sub/l": "link:../a/b.txt",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("tar\n%v\nwant\n%v", got, want)
	}
}

func TestBuildTemplateContextStream(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f.txt"), []byte("eff"), 0o644); err != nil {
		t.Fatal(err)
	}
	type seen struct {
		contentType, auth string
		body              []byte
	}
	got := make(chan seen, 1)
	c := serve(t, func(w http.ResponseWriter, r *http.Request) {
		auth, _ := base64.URLEncoding.DecodeString(r.Header.Get("X-Registry-Auth"))
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Header.Get("Content-Type"), string(auth), b}
		fmt.Fprintln(w, `{"type":"log","text":"hi"}`)
		fmt.Fprintln(w, `{"type":"done","template":{"name":"a","layers":2}}`)
	})
	var logs []string
	tpl, err := c.BuildTemplateContext(context.Background(), BuildContextRequest{Name: "a", Airfile: []byte("FROM x\nCOPY f.txt /\n"),
		ContextDir: dir, RegistryAuth: &RegistryAuth{Token: "tok"}}, func(ev BuildEvent) error {
		logs = append(logs, ev.Text)
		return nil
	})
	if err != nil || tpl.Name != "a" || tpl.Layers != 2 || fmt.Sprint(logs) != "[hi]" {
		t.Fatalf("BuildTemplateContext = %+v, %v (logs %q)", tpl, err, logs)
	}
	s := <-got
	if s.contentType != "application/x-tar" || s.auth != `{"token":"tok"}` {
		t.Errorf("Content-Type %q, registry auth %q", s.contentType, s.auth)
	}
	files := readTar(t, bytes.NewReader(s.body))
	if files["Airfile"] != "644:FROM x\nCOPY f.txt /\n" || files["f.txt"] != "644:eff" {
		t.Errorf("context %v", files)
	}
}

func TestBuildTemplateContextFailures(t *testing.T) {
	ctx := context.Background()
	// The server refuses at once, without reading the upload: the
	// caller gets its answer and the writer stops.
	big := t.TempDir()
	if err := os.WriteFile(filepath.Join(big, "big"), bytes.Repeat([]byte("x"), 8<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	c := serve(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Content-Type") != "application/x-tar" || r.URL.Query().Get("name") != "a" {
			t.Errorf("request %v %v", r.URL, r.Header)
		}
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusConflict)
		fmt.Fprint(w, `{"error":{"code":"already_exists","message":"template a already exists"}}`)
	})
	before := runtime.NumGoroutine()
	_, err := c.BuildTemplateContext(ctx, BuildContextRequest{Name: "a", Airfile: []byte("FROM x\n"), ContextDir: big}, nil)
	if !errors.Is(err, ErrConflict) {
		t.Errorf("early refusal: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before+2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before+2 {
		t.Errorf("%d goroutines after the call, %d before", n, before)
	}

	// A context the client cannot read fails with that error.
	if os.Geteuid() == 0 {
		t.Log("running as root: the unreadable-file case is skipped (root reads everything)")
	} else {
		bad := t.TempDir()
		os.WriteFile(filepath.Join(bad, "secret"), []byte("x"), 0o000)
		c2 := serve(t, func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) })
		if _, err := c2.BuildTemplateContext(ctx, BuildContextRequest{Name: "a", Airfile: []byte("FROM x\n"), ContextDir: bad}, nil); !errors.Is(err, fs.ErrPermission) {
			t.Errorf("unreadable file: %v", err)
		}
	}
	if _, err := c.BuildTemplateContext(ctx, BuildContextRequest{Name: "a", ContextDir: t.TempDir()}, nil); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("no Airfile: %v", err)
	}
	if _, err := c.BuildTemplateContext(ctx, BuildContextRequest{Name: "a", Airfile: []byte("x")}, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("no context dir: %v", err)
	}
}
