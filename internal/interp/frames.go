package interp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// frameStart is the first byte of every frame: ASCII record separator.
const frameStart = 0x1e

// splitter cuts one output channel of a context process into raw output
// and frames. A frame is frameStart, the process's nonce, a space, a JSON
// object and "\n"; it may start anywhere (raw output before it need not
// end with a newline). Bytes that look like the start of a frame but are
// not one are raw output. It is not safe for concurrent use.
type splitter struct {
	marker   []byte // frameStart + nonce + " "
	maxFrame int
	raw      func([]byte)
	frame    func([]byte)

	held    []byte // a possible marker prefix, or the frame read so far
	inFrame bool
	err     error
}

func newSplitter(nonce string, maxFrame int, raw, frame func([]byte)) *splitter {
	return &splitter{
		marker:   append([]byte{frameStart}, nonce+" "...),
		maxFrame: maxFrame,
		raw:      raw,
		frame:    frame,
	}
}

// Write feeds p. It fails (and keeps failing) once a frame is longer than
// maxFrame.
func (s *splitter) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	n := len(p)
	data := p
	if len(s.held) > 0 {
		data = append(s.held, p...)
		s.held = nil
	}
	for len(data) > 0 {
		if s.inFrame {
			i := bytes.IndexByte(data, '\n')
			if i < 0 {
				if len(data) > s.maxFrame {
					s.err = fmt.Errorf("context process sent a frame longer than %d bytes: %w", s.maxFrame, errdefs.ErrInternal)
					return 0, s.err
				}
				s.held = append([]byte(nil), data...)
				return n, nil
			}
			if i > s.maxFrame {
				s.err = fmt.Errorf("context process sent a frame longer than %d bytes: %w", s.maxFrame, errdefs.ErrInternal)
				return 0, s.err
			}
			s.inFrame = false
			s.frame(data[:i])
			data = data[i+1:]
			continue
		}
		i := bytes.IndexByte(data, frameStart)
		if i < 0 {
			s.raw(data)
			return n, nil
		}
		if i > 0 {
			s.raw(data[:i])
			data = data[i:]
		}
		switch {
		case len(data) < len(s.marker) && bytes.HasPrefix(s.marker, data):
			s.held = append([]byte(nil), data...)
			return n, nil
		case bytes.HasPrefix(data, s.marker):
			s.inFrame = true
			data = data[len(s.marker):]
		default:
			s.raw(data[:1])
			data = data[1:]
		}
	}
	return n, nil
}

// pending returns raw bytes held back as a possible frame start (at the
// end of a stream they are output after all).
func (s *splitter) pending() []byte {
	if s.inFrame {
		return nil
	}
	return s.held
}

// frame is one message of a driver. Which fields are set depends on T.
type frame struct {
	// T is the frame type: ready, stdout, stderr, result, error or end.
	T string `json:"t"`
	// ID is the cell a result, error or end belongs to.
	ID uint64 `json:"id"`
	// D is the text of stdout and stderr frames.
	D string `json:"d"`
	// Main marks the value of a cell's last expression (result).
	Main bool `json:"main"`
	// Data is a result's MIME bundle.
	Data map[string]json.RawMessage `json:"data"`
	// Name, Value and Traceback describe an error.
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback"`
	// Truncated (end) says the driver dropped output over its cap.
	Truncated bool `json:"truncated"`
	// Code (end, bash) is the cell's exit status.
	Code *int `json:"code"`
	// Lang, Version and PID describe the driver (ready).
	Lang    string `json:"lang"`
	Version string `json:"version"`
	PID     int    `json:"pid"`
}

// parseFrame decodes one frame's JSON.
func parseFrame(b []byte) (frame, error) {
	var f frame
	if err := json.Unmarshal(b, &f); err != nil {
		return f, fmt.Errorf("malformed frame from a context process: %w", errdefs.ErrInternal)
	}
	if f.T == "" {
		return f, fmt.Errorf("frame without a type from a context process: %w", errdefs.ErrInternal)
	}
	return f, nil
}

// mimeFields maps the MIME types of a driver's bundle onto Result fields.
var mimeFields = map[string]func(r *Result) *string{
	"text/plain":             func(r *Result) *string { return &r.Text },
	"text/html":              func(r *Result) *string { return &r.HTML },
	"text/markdown":          func(r *Result) *string { return &r.Markdown },
	"image/svg+xml":          func(r *Result) *string { return &r.SVG },
	"image/png":              func(r *Result) *string { return &r.PNG },
	"image/jpeg":             func(r *Result) *string { return &r.JPEG },
	"text/latex":             func(r *Result) *string { return &r.LaTeX },
	"application/javascript": func(r *Result) *string { return &r.JavaScript },
	"x-airlock/omitted":      func(r *Result) *string { return &r.Omitted },
}

// resultOf converts a result frame. Values of unknown MIME types and of
// the wrong JSON type are dropped.
func resultOf(f frame) Result {
	r := Result{IsMain: f.Main}
	for mime, raw := range f.Data {
		if mime == "application/json" {
			if json.Valid(raw) && !bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
				r.JSON = append(json.RawMessage(nil), raw...)
			}
			continue
		}
		field, ok := mimeFields[mime]
		if !ok {
			continue
		}
		var s string
		if json.Unmarshal(raw, &s) == nil {
			*field(&r) = s
		}
	}
	return r
}

// utf8Carry turns a byte stream into valid UTF-8 text: a sequence split
// between two chunks is joined, invalid bytes become U+FFFD.
type utf8Carry struct {
	held []byte
}

// text returns the text of p (after what was held back).
func (u *utf8Carry) text(p []byte) string {
	if len(u.held) > 0 {
		p = append(u.held, p...)
		u.held = nil
	}
	// Hold back an incomplete sequence at the very end.
	for i := 1; i <= utf8.UTFMax-1 && i <= len(p); i++ {
		c := p[len(p)-i]
		if c < utf8.RuneSelf {
			break
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(p[len(p)-i:]) {
				u.held = append([]byte(nil), p[len(p)-i:]...)
				p = p[:len(p)-i]
			}
			break
		}
	}
	return string(bytes.ToValidUTF8(p, []byte("\uFFFD")))
}

// flush returns what is held back, as replacement characters.
func (u *utf8Carry) flush() string {
	if len(u.held) == 0 {
		return ""
	}
	u.held = nil
	return "\uFFFD"
}
