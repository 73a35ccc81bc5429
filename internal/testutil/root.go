package testutil

import (
	"os"
	"testing"
)

// RootEnv is the variable that makes a missing root a failure: with
// RootEnv=1 (scripts/test sets it) every test that calls RequireRoot
// fails when it does not run as root, so that a run which should have
// exercised the attack, runtime and end-to-end tests cannot pass by
// skipping them. Unset (or 0), they skip.
const RootEnv = "AIRLOCK_TEST_ROOT"

// RequireRoot skips t, saying why it needs root, unless the test runs as
// root (effective uid 0); with RootEnv=1 it fails t instead. Any other
// value of RootEnv fails t too: a misspelt demand must not turn into
// skips.
func RequireRoot(t testing.TB, why string) {
	t.Helper()
	requireRoot(t, why, os.Geteuid(), os.Getenv(RootEnv))
}

// requireRoot is RequireRoot for a given effective uid and RootEnv value.
func requireRoot(t testing.TB, why string, euid int, demand string) {
	t.Helper()
	switch {
	case demand != "" && demand != "0" && demand != "1":
		t.Fatalf("%s=%q: want 1 (root-only tests must run) or 0", RootEnv, demand)
	case euid == 0:
	case demand == "1":
		t.Fatalf("%s, but the test runs as uid %d and %s=1 demands root: run the tests as root (scripts/test does)", why, euid, RootEnv)
	default:
		t.Skipf("%s (CI runs as root; %s=1 makes this a failure)", why, RootEnv)
	}
}
