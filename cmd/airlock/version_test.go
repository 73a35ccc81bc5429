package main

import (
	"bytes"
	"encoding/json"
	"runtime"
	"strings"
	"testing"
)

func TestVersion(t *testing.T) {
	var out bytes.Buffer
	if code, err := printVersion(&out, nil); code != 0 || err != nil {
		t.Fatalf("version: %d %v", code, err)
	}
	if got := out.String(); !strings.HasPrefix(got, "airlock ") || !strings.Contains(got, runtime.Version()) {
		t.Errorf("version printed %q", got)
	}
	out.Reset()
	if code, err := printVersion(&out, []string{"--json"}); code != 0 || err != nil {
		t.Fatalf("version --json: %d %v", code, err)
	}
	var v struct{ Version, Go, OS, Arch string }
	if err := json.Unmarshal(out.Bytes(), &v); err != nil || v.Version == "" || v.Go != runtime.Version() || v.OS != runtime.GOOS {
		t.Errorf("version --json = %s (%v)", out.String(), err)
	}
	if code, _ := printVersion(&out, []string{"--bogus"}); code != 2 {
		t.Errorf("version --bogus exited %d, want 2", code)
	}
}
