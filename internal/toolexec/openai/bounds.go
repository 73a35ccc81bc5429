package openai

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
	"unicode/utf8"
)

// What a request may hold in the daemon. The route runs in the daemon's
// process, so what it keeps of outputs, files and patches is the
// daemon's memory, outside the API's exec budget: requests in flight are
// capped, the answers of one request are cut past maxAnswerBytes (as
// they will be encoded), and patches, which hold a file and its lines
// several times over and burn CPU matching them, apply a few at a time.
const (
	// maxInflight caps the requests served at once.
	maxInflight = 64
	// maxAnswerBytes caps the outputs one answer carries, counted as
	// JSON-encoded (an escaped control character counts 6, or 7 inside
	// an output that is itself JSON text).
	maxAnswerBytes = 8 << 20
	// maxPatchesAtOnce caps the patches being applied at once, across
	// requests.
	maxPatchesAtOnce = 2
)

// escapedLen[d][c] is how many bytes byte c becomes when a string
// holding it is JSON-encoded d+1 times by encoding/json (which escapes
// <, > and &).
var escapedLen = func() (t [2][256]int) {
	esc := func(c byte) string {
		switch c {
		case '"':
			return `\"`
		case '\\':
			return `\\`
		case '\n':
			return `\n`
		case '\r':
			return `\r`
		case '\t':
			return `\t`
		}
		if c < 0x20 || c == '<' || c == '>' || c == '&' {
			return fmt.Sprintf(`\u%04x`, c)
		}
		return string([]byte{c})
	}
	for c := range 256 {
		e := esc(byte(c))
		if c >= utf8.RuneSelf {
			e = string([]byte{byte(c)}) // part of a valid character: as it is
		}
		t[0][c] = len(e)
		for i := 0; i < len(e); i++ {
			t[1][c] += len(esc(e[i]))
		}
		if c >= utf8.RuneSelf {
			t[1][c] = 1
		}
	}
	return t
}()

// answerBudget is what is left of an answer's maxAnswerBytes.
type answerBudget struct{ left int }

// dropNote ends an output cut by the budget.
var dropNote = fmt.Sprintf("\n[airlock: output cut: the outputs of this request reached %d bytes]", maxAnswerBytes)

// keep returns s (valid UTF-8) as the answer may carry it: whole while
// the budget lasts, else the part that fits and dropNote. nested says s
// goes into JSON text that is itself encoded as a string.
func (b *answerBudget) keep(s string, nested bool) string {
	t := &escapedLen[0]
	if nested {
		t = &escapedLen[1]
	}
	room := b.left - len(dropNote)*2
	n := 0
	for i := 0; i < len(s); i++ {
		n += t[s[i]]
		if n > b.left {
			break
		}
	}
	if n <= b.left {
		b.left -= n
		return s
	}
	// Cut at the last character boundary that fits in room.
	cut, used := 0, 0
	for cut < len(s) && used+t[s[cut]] <= room {
		used += t[s[cut]]
		cut++
	}
	for cut > 0 && cut < len(s) && !utf8.RuneStart(s[cut]) {
		cut--
	}
	b.left = 0
	if room <= 0 {
		return dropNote[1:]
	}
	return s[:cut] + dropNote
}

// maxInflightPerTenant caps one tenant's requests in flight, so that one
// tenant's slow requests (a command that runs for an hour) cannot hold
// every slot of maxInflight and refuse every other tenant.
const maxInflightPerTenant = maxInflight / 4

// bodyTimeout bounds the arrival of a request's body. The route is
// served beside the API, outside its slow-body guard: serve sets it as
// the connection's read deadline first thing, so that neither the body
// it decodes nor the rest the server drains after an early answer (an
// invalid key's 401 waits for that) holds a request longer, and clears
// it once the body is read.
var bodyTimeout = 60 * time.Second // a variable for tests

// errTrailing: the body holds more than one JSON value.
var errTrailing = errors.New("more than one JSON value")

// decodeBody decodes r's body (at most maxBody bytes, no unknown
// fields, one value) into v; a body past its deadline fails with
// os.ErrDeadlineExceeded.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errTrailing
	}
	return nil
}
