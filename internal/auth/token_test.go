package auth

import (
	"strings"
	"testing"
)

func TestNewToken(t *testing.T) {
	seen := map[string]bool{}
	for range 200 {
		id, token, err := newToken()
		if err != nil {
			t.Fatal(err)
		}
		if len(token) != TokenLen || !strings.HasPrefix(token, "al_"+id+"_") {
			t.Fatalf("token %q for id %q", token, id)
		}
		gotID, secret, ok := ParseToken(token)
		if !ok || gotID != id || len(secret) != secretLen {
			t.Fatalf("ParseToken(%q) = %q, %q, %v", token, gotID, secret, ok)
		}
		if seen[id] || seen[secret] {
			t.Fatalf("repeated random value in %q", token)
		}
		seen[id], seen[secret] = true, true
	}
}

func TestParseToken(t *testing.T) {
	good := "al_abcdefghijkl_" + strings.Repeat("a2", 26)
	if _, _, ok := ParseToken(good); !ok {
		t.Fatalf("good token refused")
	}
	bad := []string{
		"",
		"al_",
		good[:len(good)-1],
		good + "a",
		"AL" + good[2:],
		"ak_" + good[3:],
		strings.Replace(good, "_", "-", 2),
		"al_abcdefghijk_" + strings.Repeat("a", 53),  // ID too short, secret too long
		"al_abcdefghijklm" + strings.Repeat("a", 52), // no separator
		"al_ABCDEFGHIJKL_" + strings.Repeat("a", 52), // upper case
		"al_abcdefghijk1_" + strings.Repeat("a", 52), // '1' is not base32
		"al_abcdefghijkl_" + strings.Repeat("a", 51) + "8",
		"al_abcdefghijkl_" + strings.Repeat("a", 51) + "=",
		"al_abcdefghijkl_" + strings.Repeat("a", 50) + "é",
		" " + good[1:],
		"Bearer " + good,
	}
	for _, tok := range bad {
		if id, s, ok := ParseToken(tok); ok {
			t.Errorf("ParseToken(%q) = %q, %q, true", tok, id, s)
		}
	}
}

func TestHashSecret(t *testing.T) {
	h := hashSecret("abcdefghijkl", "secret")
	if len(h) != 64 || strings.ToLower(h) != h {
		t.Fatalf("hash %q", h)
	}
	if !secretMatches("abcdefghijkl", "secret", h) {
		t.Error("matching secret refused")
	}
	for _, c := range [][2]string{{"abcdefghijkl", "secreT"}, {"abcdefghijkm", "secret"}, {"abcdefghijkl", ""}} {
		if secretMatches(c[0], c[1], h) {
			t.Errorf("%q/%q matched", c[0], c[1])
		}
	}
}

// FuzzParseToken checks that the parser never panics, accepts only
// strings of the exact form and round-trips what it accepts.
func FuzzParseToken(f *testing.F) {
	_, tok, _ := newToken()
	for _, s := range []string{"", "al_", tok, tok + "x", "al_abcdefghijkl_" + strings.Repeat("\xff", 52)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, secret, ok := ParseToken(s)
		if !ok {
			if id != "" || secret != "" {
				t.Fatalf("refused %q but returned %q, %q", s, id, secret)
			}
			return
		}
		if len(s) != TokenLen || "al_"+id+"_"+secret != s || !validKeyID(id) || len(secret) != secretLen || !inAlphabet(secret) {
			t.Fatalf("accepted malformed %q: %q, %q", s, id, secret)
		}
	})
}
