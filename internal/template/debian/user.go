package debian

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/account"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// maxAccountFileBytes caps the account files read from a built tree.
const maxAccountFileBytes = 1 << 20

// ensureAccount returns content (an /etc/passwd- or /etc/group-style
// file) with line appended unless an entry called name already exists.
// The existing entry must then carry id in its third field; another entry
// with that id is an error too, since two names for uid 1000 would make
// the sandbox user ambiguous.
func ensureAccount(file string, content []byte, name string, id int, line string) ([]byte, error) {
	if len(content) > maxAccountFileBytes {
		return nil, fmt.Errorf("debian: %s is too large: %w", file, errdefs.ErrFailedPrecondition)
	}
	found := false
	for _, l := range strings.Split(string(content), "\n") {
		f := strings.Split(l, ":")
		if len(f) < 3 || strings.HasPrefix(l, "#") {
			continue
		}
		n, err := strconv.Atoi(f[2])
		switch {
		case f[0] == name && (err != nil || n != id):
			return nil, fmt.Errorf("debian: %s has %q with id %q, want %d: %w", file, name, f[2], id, errdefs.ErrFailedPrecondition)
		case f[0] == name:
			found = true
		case err == nil && n == id:
			return nil, fmt.Errorf("debian: %s gives id %d to %q, want %q: %w", file, id, f[0], name, errdefs.ErrFailedPrecondition)
		}
	}
	if found {
		return content, nil
	}
	return appendLine(content, line), nil
}

// ensureShadow returns content (an /etc/shadow- or /etc/gshadow-style
// file) with line appended unless an entry called name exists.
func ensureShadow(file string, content []byte, name, line string) ([]byte, error) {
	if len(content) > maxAccountFileBytes {
		return nil, fmt.Errorf("debian: %s is too large: %w", file, errdefs.ErrFailedPrecondition)
	}
	for _, l := range strings.Split(string(content), "\n") {
		if strings.HasPrefix(l, name+":") {
			return content, nil
		}
	}
	return appendLine(content, line), nil
}

// appendLine appends line and a newline to content, first ending an
// unterminated last line.
func appendLine(content []byte, line string) []byte {
	out := bytes.Clone(content)
	if len(out) > 0 && out[len(out)-1] != '\n' {
		out = append(out, '\n')
	}
	return append(append(out, line...), '\n')
}

// passwdLine, groupLine, shadowLine and gshadowLine are the entries of
// the sandbox account. The password is locked ("*", "!"): nobody logs in.
func passwdLine(shell string) string {
	return fmt.Sprintf("%s:x:%d:%d::%s:%s", account.SandboxName, account.SandboxUID, account.SandboxGID, account.SandboxHome, shell)
}

func groupLine() string { return fmt.Sprintf("%s:x:%d:", account.SandboxName, account.SandboxGID) }

// shadowLine has the nine fields of shadow(5); empty aging fields disable
// password aging.
func shadowLine() string { return account.SandboxName + ":*:::::::" }

func gshadowLine() string { return account.SandboxName + ":!::" }
