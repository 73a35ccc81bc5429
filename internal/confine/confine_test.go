package confine

import (
	"errors"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

func TestPolicyValidate(t *testing.T) {
	many := make([]string, MaxRules+1)
	for i := range many {
		many[i] = "/x"
	}
	tests := []struct {
		name string
		p    Policy
		ok   bool
	}{
		{"empty", Policy{}, true},
		{"typical", Policy{ReadOnly: []string{"/"}, Writable: []string{"/tmp", "/home/user"},
			DevicePaths: []string{"/dev/null", "/dev/pts"}, WritableFDs: []int{3, 4}, MinLandlockABI: 5}, true},
		{"relative", Policy{ReadOnly: []string{"usr"}}, false},
		{"unclean", Policy{Writable: []string{"/tmp/../etc"}}, false},
		{"trailing slash", Policy{Writable: []string{"/tmp/"}}, false},
		{"empty path", Policy{DevicePaths: []string{""}}, false},
		{"nul", Policy{ReadOnly: []string{"/usr\x00/bin"}}, false},
		{"too long", Policy{ReadOnly: []string{"/" + strings.Repeat("a", MaxPathLen)}}, false},
		{"too many", Policy{ReadOnly: many}, false},
		{"too many fds", Policy{WritableFDs: make([]int, MaxRules+1)}, false},
		{"negative fd", Policy{WritableFDs: []int{-1}}, false},
		{"negative abi", Policy{MinLandlockABI: -1}, false},
		{"future abi", Policy{MinLandlockABI: maxLandlockABI + 1}, false},
	}
	for _, tt := range tests {
		_, err := tt.p.validate()
		if (err == nil) != tt.ok {
			t.Errorf("%s: err = %v, want ok=%v", tt.name, err, tt.ok)
		}
		if err != nil && !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: %v is not ErrInvalidArgument", tt.name, err)
		}
	}
}

func FuzzValidatePath(f *testing.F) {
	for _, s := range []string{"/", "/tmp", "tmp", "/a/../b", "/a//b", "/a/./b", "", "/\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, path string) {
		if validatePath(path) != nil {
			return
		}
		if path == "" || path[0] != '/' || strings.Contains(path, "//") || strings.Contains(path, "/../") ||
			strings.HasSuffix(path, "/..") || strings.ContainsRune(path, 0) || (len(path) > 1 && path[len(path)-1] == '/') {
			t.Errorf("validatePath(%q) accepted", path)
		}
	})
}
