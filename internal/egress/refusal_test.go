package egress

import (
	"bufio"
	"fmt"
	"io"
	"strings"
	"testing"
)

// TestRefusalNamesClass: the proxy's answer to a destination refused by
// the resolved-address guard names the address class (not the address a
// name resolved to), over CONNECT and plain HTTP forwarding, so that a tool's
// error says why ("a loopback address"), not "a  address".
func TestRefusalNamesClass(t *testing.T) {
	h := newHarness(t, []string{"rebind.test", "*.test", "0.0.0.0/0"},
		map[string]string{"rebind.test": "127.0.0.1", "meta.test": "169.254.169.254"})
	h.dialer.forbid(true)
	for _, tt := range []struct{ target, class string }{
		{"rebind.test:80", "loopback"},
		{"meta.test:80", "metadata"},
		{"169.254.169.254:80", "metadata"},
	} {
		want := tt.target + ": destination is a " + tt.class + " address that the egress allowlist does not list"
		c, br, code, _ := h.connect(tt.target)
		body, _ := io.ReadAll(br)
		c.Close()
		if code != 403 || !strings.Contains(string(body), want) {
			t.Errorf("CONNECT %s: %d %q, want 403 and %q", tt.target, code, body, want)
		}
		c = h.dialProxy()
		fmt.Fprintf(c, "GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n", tt.target, tt.target)
		br = bufio.NewReader(c)
		code, _ = readHead(t, br)
		body, _ = io.ReadAll(br)
		if code != 403 || !strings.Contains(string(body), want) {
			t.Errorf("GET via %s: %d %q, want 403 and %q", tt.target, code, body, want)
		}
		for range 2 {
			if ev := h.events.next(t); ev.Reason != ReasonBlockedAddress || string(ev.Class) != tt.class {
				t.Errorf("%s: event %+v", tt.target, ev)
			}
		}
	}
	if n := h.dialer.count(); n != 0 {
		t.Errorf("%d dials", n)
	}
}
