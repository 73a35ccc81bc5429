package interp

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// collect feeds chunks to a splitter and returns what it saw: raw output
// joined, and the frames.
func collect(t testing.TB, nonce string, max int, chunks ...string) (raw string, frames []string, err error) {
	t.Helper()
	var rb bytes.Buffer
	s := newSplitter(nonce, max, func(b []byte) { rb.Write(b) }, func(b []byte) { frames = append(frames, string(b)) })
	for _, c := range chunks {
		if _, err = s.Write([]byte(c)); err != nil {
			break
		}
	}
	rb.Write(s.pending())
	return rb.String(), frames, err
}

func TestSplitter(t *testing.T) {
	const n = "0123456789abcdef"
	m := "\x1e" + n + " "
	tests := []struct {
		name   string
		chunks []string
		raw    string
		frames []string
	}{
		{"raw only", []string{"hello\n", "world"}, "hello\nworld", nil},
		{"one frame", []string{m + `{"t":"end"}` + "\n"}, "", []string{`{"t":"end"}`}},
		{"frame after raw without newline", []string{"abc" + m + `{"t":"x"}` + "\ndef"}, "abcdef", []string{`{"t":"x"}`}},
		{"marker split", []string{"a\x1e01234", "56789abcdef {\"t\":1}", "\nb"}, "ab", []string{`{"t":1}`}},
		{"marker split byte by byte", strings.Split(m+"{}\n", ""), "", []string{"{}"}},
		{"wrong nonce is raw", []string{"\x1e0123456789abcdeX {}\n"}, "\x1e0123456789abcdeX {}\n", nil},
		{"lone separator", []string{"a\x1eb"}, "a\x1eb", nil},
		{"separator at end is held then raw", []string{"a\x1e"}, "a\x1e", nil},
		{"two frames one chunk", []string{m + "1\n" + m + "2\n"}, "", []string{"1", "2"}},
		{"frame split across chunks", []string{m + `{"t":`, `"stdout"}`, "\n"}, "", []string{`{"t":"stdout"}`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw, frames, err := collect(t, n, 1024, tt.chunks...)
			if err != nil {
				t.Fatal(err)
			}
			if raw != tt.raw {
				t.Errorf("raw %q, want %q", raw, tt.raw)
			}
			if strings.Join(frames, "|") != strings.Join(tt.frames, "|") {
				t.Errorf("frames %q, want %q", frames, tt.frames)
			}
		})
	}
}

func TestSplitterFrameCap(t *testing.T) {
	const n = "0123456789abcdef"
	m := "\x1e" + n + " "
	if _, _, err := collect(t, n, 16, m+strings.Repeat("x", 17)+"\n"); err == nil {
		t.Error("a frame over the cap in one chunk was accepted")
	}
	if _, _, err := collect(t, n, 16, m+strings.Repeat("x", 10), strings.Repeat("x", 10)); err == nil {
		t.Error("a frame over the cap across chunks was accepted")
	}
	if _, f, err := collect(t, n, 16, m+strings.Repeat("x", 16)+"\n"); err != nil || len(f) != 1 {
		t.Errorf("a frame at the cap: %v %v", f, err)
	}
}

func FuzzSplitter(f *testing.F) {
	const n = "0123456789abcdef"
	f.Add([]byte("\x1e0123456789abcdef {\"t\":\"end\"}\nraw"), 3)
	f.Add([]byte("a\x1e\x1e0123\n"), 1)
	f.Fuzz(func(t *testing.T, data []byte, cut int) {
		// Splitting the input anywhere must not change the result.
		whole, wf, werr := collect(t, n, 64, string(data))
		if cut < 0 {
			cut = -cut
		}
		cut %= len(data) + 1
		parts, pf, perr := collect(t, n, 64, string(data[:cut]), string(data[cut:]))
		if (werr == nil) != (perr == nil) {
			return // the cap may trip at a different point
		}
		if werr == nil && (whole != parts || strings.Join(wf, "\x00") != strings.Join(pf, "\x00")) {
			t.Fatalf("split at %d: raw %q vs %q, frames %q vs %q", cut, whole, parts, wf, pf)
		}
		if werr == nil {
			// Raw output plus frames account for every byte but the markers.
			total := len(whole)
			for _, fr := range wf {
				total += len(fr) + len("\x1e"+n+" \n")
			}
			if rest := len(data) - total; rest < 0 || rest > len("\x1e"+n+" ")+64 {
				t.Fatalf("lost or invented bytes: %d of %d", rest, len(data))
			}
		}
	})
}

func FuzzParseFrame(f *testing.F) {
	f.Add([]byte(`{"t":"result","id":3,"main":true,"data":{"text/plain":"1","image/png":"AA==","application/json":{"a":1}}}`))
	f.Add([]byte(`{"t":"end","id":1,"code":2}`))
	f.Add([]byte(`{"t":"result","data":{"text/html":5,"application/json":null}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := parseFrame(b)
		if err != nil {
			return
		}
		r := resultOf(fr)
		if r.JSON != nil && !json.Valid(r.JSON) {
			t.Fatalf("invalid JSON kept: %q", r.JSON)
		}
	})
}

func TestResultOf(t *testing.T) {
	f, err := parseFrame([]byte(`{"t":"result","id":3,"main":true,"data":{"text/plain":"df","text/html":"<table/>",` +
		`"image/png":"iVBO","application/json":{"a":[1]},"text/unknown":"x","image/svg+xml":7,"x-airlock/omitted":"big"}}`))
	if err != nil {
		t.Fatal(err)
	}
	r := resultOf(f)
	if !r.IsMain || r.Text != "df" || r.HTML != "<table/>" || r.PNG != "iVBO" || string(r.JSON) != `{"a":[1]}` ||
		r.SVG != "" || r.Omitted != "big" {
		t.Errorf("result %+v", r)
	}
	if _, err := parseFrame([]byte(`{"id":1}`)); err == nil {
		t.Error("a frame without a type was accepted")
	}
	if _, err := parseFrame([]byte(`{"t":`)); err == nil {
		t.Error("malformed JSON was accepted")
	}
}

func TestUTF8Carry(t *testing.T) {
	var u utf8Carry
	euro := "€" // 3 bytes
	got := u.text([]byte("a" + euro[:1]))
	got += u.text([]byte(euro[1:2]))
	got += u.text([]byte(euro[2:] + "b\xff"))
	if got != "a€b\uFFFD" {
		t.Errorf("text %q", got)
	}
	if s := u.text([]byte("x" + euro[:2])); s != "x" {
		t.Errorf("held back: %q", s)
	}
	if s := u.flush(); s != "\uFFFD" {
		t.Errorf("flush %q", s)
	}
	if s := u.flush(); s != "" {
		t.Errorf("second flush %q", s)
	}
}

func TestTags(t *testing.T) {
	c := &codeContext{id: "ctx-abcdefghijklmnop", lang: Python, isDefault: true}
	tag := kernelTag(c, 3, "0123456789abcdef")
	if len(tag) > 128 {
		t.Errorf("tag %q is longer than the agent allows", tag)
	}
	p, ok := parseTag(tag)
	if !ok || p.id != c.id || p.gen != 3 || p.lang != Python || !p.isDefault || p.nonce != "0123456789abcdef" {
		t.Errorf("parsed %+v %v", p, ok)
	}
	for _, bad := range []string{
		"other", "airlock-interp:", "airlock-interp:ctx-abcdefghijklmnop:3:python:d",
		"airlock-interp:ctx-abcdefghijklmnop:0:python:d:0123456789abcdef",
		"airlock-interp:ctx-abcdefghijklmnop:3:ruby:d:0123456789abcdef",
		"airlock-interp:ctx-ABC:3:python:d:0123456789abcdef",
		"airlock-interp:ctx-abcdefghijklmnop:3:python:x:0123456789abcdef",
	} {
		if _, ok := parseTag(bad); ok {
			t.Errorf("parseTag(%q) accepted", bad)
		}
	}
}

func TestCommands(t *testing.T) {
	b, err := bashCommand(7, "echo hi", map[string]string{"B": "2", "A": "x=y"})
	if err != nil || string(b) != "7 2\nA=x=y\x00B=2\x00echo hi\x00" {
		t.Errorf("bash command %q %v", b, err)
	}
	l, err := lengthCommand(7, "print('é')", map[string]string{"K": "v\nw"})
	if err != nil || string(l) != "7 1 11\n1 3\nKv\nwprint('é')" {
		t.Errorf("length command %q %v", l, err)
	}
	j, err := jsonCommand(7, "print(1)\n", nil)
	if err != nil || string(j) != `{"id":7,"code":"print(1)\n"}`+"\n" {
		t.Errorf("json command %q %v", j, err)
	}
}

func TestParseLanguage(t *testing.T) {
	for in, want := range map[string]Language{"python": Python, "PY": Python, "js": JavaScript, "node": JavaScript, "sh": Bash, " bash ": Bash} {
		if got, err := ParseLanguage(in); err != nil || got != want {
			t.Errorf("ParseLanguage(%q) = %q, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "ruby", strings.Repeat("x", 100)} {
		if _, err := ParseLanguage(in); err == nil {
			t.Errorf("ParseLanguage(%q) accepted", in)
		}
	}
}

func TestCutUTF8(t *testing.T) {
	if got := cutUTF8("a€", 2); got != "a" {
		t.Errorf("cut %q", got)
	}
	if got := cutUTF8("abc", 5); got != "abc" {
		t.Errorf("cut %q", got)
	}
}
