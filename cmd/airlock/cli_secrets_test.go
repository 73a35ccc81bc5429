package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/secrets"
)

// revealed is the value the server stored for the admin's tenant's
// secret name.
func (e *cliEnv) revealed(name string) string {
	e.t.Helper()
	p, err := e.auth.Authenticate(context.Background(), e.admin)
	if err != nil {
		e.t.Fatal(err)
	}
	v, err := secrets.NewReader(e.secrets).Reveal(context.Background(), p.TenantID, name)
	if err != nil {
		e.t.Fatalf("reveal %s: %v", name, err)
	}
	defer v.Wipe()
	return string(v.Bytes())
}

// TestCLISecrets: set from stdin (one trailing newline dropped) and from
// a file (byte for byte), ls, rm; the value is in no output.
func TestCLISecrets(t *testing.T) {
	e := newCLIEnv(t)
	const canary = "CANARY-cli-5d1e"
	var outputs []string
	ok := func(stdin string, args ...string) result {
		t.Helper()
		r := e.ok(stdin, args...)
		outputs = append(outputs, r.stdout, r.stderr)
		return r
	}
	if r := ok(canary+"\n", "secrets", "set", "api", "-d", "the CI token"); r.stdout != "Created secret api (version 1)\n" {
		t.Errorf("set printed %q", r.stdout)
	}
	if got := e.revealed("api"); got != canary {
		t.Errorf("stored %q from stdin, want %q", got, canary)
	}
	file := filepath.Join(t.TempDir(), "value")
	if err := os.WriteFile(file, []byte(canary+"\nsecond line\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := ok("", "secrets", "set", "--from-file", file, "api"); r.stdout != "Updated secret api (version 2)\n" {
		t.Errorf("set --from-file printed %q", r.stdout)
	}
	if got := e.revealed("api"); got != canary+"\nsecond line\n" {
		t.Errorf("stored %q from the file", got)
	}
	ok(canary+"\r\n", "secret", "put", "b.two", "--description", "second")
	if got := e.revealed("b.two"); got != canary {
		t.Errorf("stored %q from a CRLF line", got)
	}
	s := decodeJSON[wire.Secret](t, ok(canary, "secrets", "set", "--json", "b.two").stdout)
	if s.Name != "b.two" || s.Version != 2 || s.Description != "second" {
		t.Errorf("set --json = %+v", s)
	}

	table := ok("", "secrets", "ls").stdout
	for _, want := range []string{"NAME", "VERSION", "DESCRIPTION", "api", "the CI token", "b.two"} {
		if !strings.Contains(table, want) {
			t.Errorf("secrets ls lacks %q:\n%s", want, table)
		}
	}
	list := decodeJSON[wire.SecretList](t, ok("", "secrets", "ls", "--json").stdout)
	if len(list.Secrets) != 2 || list.Secrets[0].Name != "api" || list.Secrets[0].Version != 2 {
		t.Errorf("secrets ls --json = %+v", list)
	}
	// -d "" clears the description.
	ok(canary, "secrets", "set", "-d", "", "b.two")
	if list := decodeJSON[wire.SecretList](t, ok("", "secrets", "ls", "--json").stdout); list.Secrets[1].Description != "" {
		t.Errorf("after -d \"\": %+v", list.Secrets[1])
	}

	if r := ok("", "secrets", "rm", "api", "b.two"); r.stdout != "api\nb.two\n" {
		t.Errorf("secrets rm printed %q", r.stdout)
	}
	r := e.run("", "secrets", "rm", "api")
	outputs = append(outputs, r.stdout, r.stderr)
	if r.code != 1 || !strings.Contains(r.stderr, "api") {
		t.Errorf("rm of a missing secret: %+v", r)
	}
	if list := decodeJSON[wire.SecretList](t, ok("", "secrets", "ls", "--json").stdout); len(list.Secrets) != 0 {
		t.Errorf("secrets after rm: %+v", list)
	}
	for _, o := range outputs {
		if strings.Contains(o, "CANARY") {
			t.Errorf("an output holds the value: %q", o)
		}
	}
}

// TestCLISecretsRefused: no name, a value as an argument, an empty or
// oversized value, an unreadable file and a server refusal are errors,
// and nothing is stored.
func TestCLISecretsRefused(t *testing.T) {
	e := newCLIEnv(t)
	big := strings.Repeat("v", client.MaxSecretBytes+1)
	for _, tt := range []struct {
		stdin string
		args  []string
		code  int
		msg   string
	}{
		{"v", []string{"secrets"}, 2, "subcommand"},
		{"v", []string{"secrets", "show", "x"}, 2, "unknown secrets subcommand"},
		{"v", []string{"secrets", "set"}, 2, "never an argument"},
		{"", []string{"secrets", "set", "x", "the-value"}, 2, "never an argument"},
		{"", []string{"secrets", "set", "x"}, 2, "the value is empty"},
		{"\n", []string{"secrets", "set", "x"}, 2, "the value is empty"},
		{big, []string{"secrets", "set", "x"}, 2, "larger than 65536 bytes"},
		{"", []string{"secrets", "set", "--from-file", filepath.Join(t.TempDir(), "none"), "x"}, 2, "reading the value"},
		{"v", []string{"secrets", "set", "1x"}, 1, "secret name"},
		{"v", []string{"secrets", "set", "-d", "a\x01", "x"}, 1, "description"},
		{"", []string{"secrets", "ls", "extra"}, 2, "no arguments"},
		{"", []string{"secrets", "rm"}, 2, "usage"},
	} {
		r := e.run(tt.stdin, tt.args...)
		if r.code != tt.code || r.err == nil || !strings.Contains(r.err.Error(), tt.msg) {
			t.Errorf("%q: code %d, err %v; want %d %q", tt.args, r.code, r.err, tt.code, tt.msg)
		}
	}
	p, err := e.auth.Authenticate(context.Background(), e.admin)
	if err != nil {
		t.Fatal(err)
	}
	if ss, err := e.secrets.List(context.Background(), p.TenantID); err != nil || len(ss) != 0 {
		t.Errorf("stored %+v, %v", ss, err)
	}
}

// TestReadSecretLine: the line editing of a hidden terminal line.
func TestReadSecretLine(t *testing.T) {
	for _, tt := range []struct {
		in, want string
		max      int
		err      error
	}{
		{"abc\r", "abc", 64, nil},
		{"abc\nrest", "abc", 64, nil},
		{"abc\x04", "abc", 64, nil},
		{"abc", "abc", 64, nil}, // end of input
		{"abx\x7fc\r", "abc", 64, nil},
		{"aé\x7f\x7f\x7fb\r", "b", 64, nil}, // Backspace removes whole characters, and stops at the start
		{"wrong\x15right\r", "right", 64, nil},
		{"secret\x03", "", 64, errCanceled},
		{"1234\r", "1234", 4, nil},
		{"12345\r", "", 4, errInputTooLarge},
		{strings.Repeat("x", 1000) + "\r", strings.Repeat("x", 1000), 2000, nil}, // past the first buffer
	} {
		got, err := readSecretLine(strings.NewReader(tt.in), tt.max)
		if string(got) != tt.want || !errors.Is(err, tt.err) {
			t.Errorf("readSecretLine(%.20q) = %.20q, %v; want %.20q, %v", tt.in, got, err, tt.want, tt.err)
		}
	}
}
