package e2b

import (
	"net/http/httptest"
	"testing"
)

func TestIDs(t *testing.T) {
	if got := ToE2BID("sb-abcdefghijklmnop"); got != "sbabcdefghijklmnop" {
		t.Errorf("ToE2BID = %s", got)
	}
	for in, want := range map[string]string{"sbabcdefghijklmnop": "sb-abcdefghijklmnop", "sb-abcdefghijklmnop": "sb-abcdefghijklmnop"} {
		if got, err := FromE2BID(in); err != nil || got != want {
			t.Errorf("FromE2BID(%s) = %s, %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "sb", "i1234567890abcdefghij", "sbABCDEFGHIJKLMNOP", "sb-abc", "sbabcdefghijklmno1", "../sbabcdefghijklmnop", "sbabcdefghijklmnopq"} {
		if _, err := FromE2BID(bad); err == nil {
			t.Errorf("FromE2BID(%q) accepted", bad)
		}
	}
}

func TestKeys(t *testing.T) {
	const k = "al_abc_0123"
	for _, h := range []string{"X-API-Key", "X-Access-Token", "E2B-Traffic-Access-Token"} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set(h, Key(k))
		if got, ok := airlockKey(r); !ok || got != k {
			t.Errorf("%s: %q %v", h, got, ok)
		}
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-API-Key", k)
	if got, ok := airlockKey(r); !ok || got != k {
		t.Errorf("a key as it is: %q %v", got, ok)
	}
	for _, bad := range []string{"", "e2b_", "e2b_zz", "e2b_0"} {
		r := httptest.NewRequest("GET", "/", nil)
		if bad != "" {
			r.Header.Set("X-API-Key", bad)
		}
		if got, ok := airlockKey(r); ok {
			t.Errorf("%q gave key %q", bad, got)
		}
	}
}

// TestTarget: sandbox traffic is found by E2B's headers, else by a
// {port}-{id}.{domain} host, and nothing else is.
func TestTarget(t *testing.T) {
	h, err := New(Config{APIURL: "http://127.0.0.1:1", Domain: "e2b.test"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		host, id, port string
		want           target
		ok, bad        bool
	}{
		{id: "sbabcdefghijklmnop", port: "49999", want: target{"sb-abcdefghijklmnop", 49999}, ok: true},
		{id: "sbabcdefghijklmnop", want: target{"sb-abcdefghijklmnop", EnvdPort}, ok: true},
		{id: "sbabcdefghijklmnop", port: "0", bad: true},
		{id: "nope", bad: true},
		{host: "8000-sbabcdefghijklmnop.e2b.test", want: target{"sb-abcdefghijklmnop", 8000}, ok: true},
		{host: "8000-sbabcdefghijklmnop.e2b.test:3000", want: target{"sb-abcdefghijklmnop", 8000}, ok: true},
		{host: "8000-sb-abcdefghijklmnop.e2b.test", want: target{"sb-abcdefghijklmnop", 8000}, ok: true},
		{host: "a.8000-sbabcdefghijklmnop.e2b.test"},
		{host: "8000-sbabcdefghijklmnop.other.test"},
		{host: "127.0.0.1:3000"},
		{host: "x-sbabcdefghijklmnop.e2b.test", bad: true},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		if tt.host != "" {
			r.Host = tt.host
		}
		if tt.id != "" {
			r.Header.Set("E2b-Sandbox-Id", tt.id)
			if tt.port != "" {
				r.Header.Set("E2b-Sandbox-Port", tt.port)
			}
		}
		got, ok, err := h.target(r)
		if (err != nil) != tt.bad || ok != tt.ok || got != tt.want {
			t.Errorf("%+v: %+v %v %v", tt, got, ok, err)
		}
	}
}
