package registry

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

func TestParseRecipe(t *testing.T) {
	for _, tc := range []struct {
		text       string
		withCtx    bool
		base       string
		pulls      bool
		steps      int
		errPrefix  string
		needsCtxAt int
	}{
		{text: "FROM x/y:1\nRUN true", base: "x/y:1", pulls: true, steps: 2},
		{text: "FROM template:py\nRUN a\nRUN b", base: "template:py", steps: 3},
		{text: "DEBIAN bookworm curl git", base: "debian bookworm (2 packages)", steps: 1},
		{text: "FROM x/y:1\nCOPY a /a", withCtx: true, base: "x/y:1", pulls: true, steps: 2},
		{text: "FROM x/y:1\nCOPY a /a", needsCtxAt: 2, errPrefix: "airfile line 2: COPY needs a build context"},
		{text: "FROM x/y:1\nVOLUME /d", errPrefix: "airfile line 2: VOLUME"},
	} {
		r, err := ParseRecipe(tc.text, tc.withCtx, 0)
		if tc.errPrefix != "" {
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.HasPrefix(err.Error(), tc.errPrefix) {
				t.Errorf("%q: %v, want invalid argument %q", tc.text, err, tc.errPrefix)
			}
			var nc *NeedsContextError
			if got := errors.As(err, &nc); got != (tc.needsCtxAt != 0) || (got && nc.Line != tc.needsCtxAt) {
				t.Errorf("%q: NeedsContextError %v (%+v), want line %d", tc.text, got, nc, tc.needsCtxAt)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.text, err)
			continue
		}
		if r.Base() != tc.base || r.PullsImage() != tc.pulls || r.Steps() != tc.steps {
			t.Errorf("%q: base %q pulls %v steps %d, want %q %v %d", tc.text, r.Base(), r.PullsImage(), r.Steps(), tc.base, tc.pulls, tc.steps)
		}
	}
	// Lines the caller put before its client's text are not the client's.
	if _, err := ParseRecipe("FROM x/y:1\nRUN true\nCOPY a /a", false, 1); err == nil || !strings.HasPrefix(err.Error(), "airfile line 2: COPY") {
		t.Errorf("shifted: %v", err)
	}
	r, err := ParseRecipe("FROM x/y:1\nEXPOSE 80\nRUN true", false, 1)
	if err != nil {
		t.Fatal(err)
	}
	if ig := r.Ignored(1); len(ig) != 1 || !strings.Contains(ig[0], "line 1") {
		t.Errorf("Ignored(1) = %q, want one line naming line 1", ig)
	}
}

func TestDebianBase(t *testing.T) {
	line, err := DebianBase("bookworm", []string{"curl", "git"})
	if err != nil || line != "DEBIAN bookworm curl git" {
		t.Errorf("DebianBase = %q, %v", line, err)
	}
	long := strings.Repeat("x", 200) + "!"
	for _, tc := range []struct {
		suite string
		pkgs  []string
		want  string
	}{
		{"Bookworm!", nil, "debian.suite must be"},
		{"bookworm", []string{"ok", "rm -rf"}, `debian.packages: "rm -rf" is not a Debian package name`},
		{"bookworm", []string{long}, `debian.packages: "` + long[:80] + `" is not`},
		{"bookworm", slices.Repeat([]string{"a1"}, 100000), "debian.packages has more than"},
	} {
		if _, err := DebianBase(tc.suite, tc.pkgs); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("DebianBase(%q, %d packages) = %v, want %q", tc.suite, len(tc.pkgs), err, tc.want)
		}
	}
}
