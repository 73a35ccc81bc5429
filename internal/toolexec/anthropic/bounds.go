package anthropic

import (
	"fmt"
	"time"
	"unicode/utf8"
)

// What a request may hold in the daemon. The route runs in the daemon's
// process, so what it keeps of outputs and files is the daemon's memory,
// outside the API's exec budget: besides the requests in flight
// (maxInflight), the results of one request are cut past maxAnswerBytes
// (as they will be encoded), and the editor's commands that read a file
// (which hold it several times over) run maxFilesAtOnce at a time across
// requests.
const (
	// maxAnswerBytes caps the results one answer carries, counted as
	// JSON-encoded (an escaped control character counts 6).
	maxAnswerBytes = 8 << 20
	// maxFilesAtOnce caps the editor commands reading a file at once.
	maxFilesAtOnce = 4
)

// escapedLen[c] is how many bytes byte c becomes in a JSON string
// encoded by encoding/json (which escapes <, > and &); a byte of a
// multi-byte character stays one.
var escapedLen = func() (t [256]int) {
	for c := range 256 {
		switch {
		case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t':
			t[c] = 2
		case c < 0x20 || c == '<' || c == '>' || c == '&':
			t[c] = 6
		default:
			t[c] = 1
		}
	}
	return t
}()

// answerBudget is what is left of an answer's maxAnswerBytes.
type answerBudget struct{ left int }

// dropNote ends a result cut by the budget.
var dropNote = fmt.Sprintf("\n[output cut: the results of this request reached %d bytes]", maxAnswerBytes)

// keep returns s as the answer may carry it: whole while the budget
// lasts, else the part that fits and dropNote.
func (b *answerBudget) keep(s string) string {
	n := 0
	for i := 0; i < len(s) && n <= b.left; i++ {
		n += escapedLen[s[i]]
	}
	if n <= b.left {
		b.left -= n
		return s
	}
	room := b.left - 2*len(dropNote)
	b.left = 0
	if room <= 0 {
		return dropNote[1:]
	}
	cut, used := 0, 0
	for cut < len(s) && used+escapedLen[s[cut]] <= room {
		used += escapedLen[s[cut]]
		cut++
	}
	for cut > 0 && cut < len(s) && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + dropNote
}

// maxInflightPerTenant caps one tenant's requests in flight, so that one
// tenant's slow requests (a command that runs for an hour) cannot hold
// every slot of maxInflight and refuse every other tenant.
const maxInflightPerTenant = maxInflight / 4

// bodyTimeout bounds the arrival of a request's body. The routes are
// served beside the API, outside its slow-body guard: toolUses sets it
// as the connection's read deadline first thing, so that neither the
// body it decodes nor the rest the server drains after an early answer
// (an invalid key's 401 waits for that) holds a request longer, and
// clears it once the body is read.
var bodyTimeout = 60 * time.Second // a variable for tests
