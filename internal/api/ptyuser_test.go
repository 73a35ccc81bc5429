package api

import "testing"

func TestPTYUserParam(t *testing.T) {
	tests := []struct {
		raw, user string
		ok        bool
	}{
		{"", "", true},
		{"user=user", "user", true},
		{"user=root", "root", true},
		{"user=admin", "", false},
		{"user=root&user=user", "", false},
	}
	for _, tt := range tests {
		p, err := parsePTYQuery(tt.raw)
		if (err == nil) != tt.ok || (tt.ok && p.user != tt.user) {
			t.Errorf("parsePTYQuery(%q) = %+v, %v", tt.raw, p, err)
		}
	}
}
