package account

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

var testDB = DB{
	Passwd: []byte("root:x:0:0:root:/root:/bin/bash\n" +
		"node:x:1000:1000::/home/node:/bin/sh\n" +
		"odd:x:99999:1:too big:/x:/bin/sh\n" + // unmapped uid: skipped
		"rel:x:200:200::relative/home:/bin/sh\n" +
		"short:x:1\n" +
		"# app:x:7:7::/:/bin/sh\n" +
		"app:x:1234:999::/app:/bin/sh\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"),
	Group: []byte("root:x:0:\nstaff:x:50:app,node\nbig:x:70000:app\n" +
		"apps:x:999:app\n" + // app's primary group: not supplementary
		"audio:x:29:node,app\nstaff2:x:50:app\n" + // a repeated gid counts once
		"odd:x:abc:app\n"),
}

func TestResolve(t *testing.T) {
	tests := []struct {
		spec string
		want User
	}{
		{"root", Root},
		{"0", Root},
		{"node", User{Name: "node", UID: 1000, GID: 1000, Home: "/home/node", Groups: []uint32{29, 50}}},
		{"1000", User{Name: "node", UID: 1000, GID: 1000, Home: "/home/node", Groups: []uint32{29, 50}}},
		{"app", User{Name: "app", UID: 1234, GID: 999, Home: "/app", Groups: []uint32{29, 50}}},
		{"user", SandboxUser}, // not in the image: the sandbox's own
		// An explicit group replaces the primary one and drops the others,
		// as Docker does.
		{"nobody:staff", User{Name: "nobody", UID: 65534, GID: 50, Home: "/nonexistent"}},
		{"app:0", User{Name: "app", UID: 1234, GID: 0, Home: "/app"}},
		{"rel", User{Name: "rel", UID: 200, GID: 200, Home: "/"}},
		{"4321", User{Name: "4321", UID: 4321, GID: 0, Home: "/"}},
		{"4321:4321", User{Name: "4321", UID: 4321, GID: 4321, Home: "/"}},
	}
	for _, tc := range tests {
		got, err := Resolve(tc.spec, testDB)
		if err != nil || !got.Equal(tc.want) {
			t.Errorf("Resolve(%q) = %+v, %v; want %+v", tc.spec, got, err, tc.want)
		}
	}
	for spec, msg := range map[string]string{
		"odd":                     "not in the image's /etc/passwd",
		"short":                   "not in the image's /etc/passwd",
		"99999":                   "uid must be between",
		"node:big":                `group "big" is not in`,
		"node:":                   "want name, uid",
		":staff":                  "want name, uid",
		"":                        "want name, uid",
		"a\x00b":                  "want name, uid",
		"node:ghost":              `group "ghost" is not in`,
		strings.Repeat("g", 5000): "...",
	} {
		_, err := Resolve(spec, testDB)
		if err == nil || !strings.Contains(err.Error(), msg) || !errors.Is(err, errdefs.ErrInvalidArgument) || len(err.Error()) > 200 {
			t.Errorf("Resolve(%.20q) = %v, want an invalid-argument error saying %q", spec, err, msg)
		}
	}
	// Without account files only the sandbox's own accounts and ids exist.
	if u, err := Resolve("root", DB{}); err != nil || !u.Equal(Root) {
		t.Errorf("root without /etc/passwd: %+v, %v", u, err)
	}
	if u, err := Resolve("user:user", DB{}); err != nil || !u.Equal(SandboxUser) {
		t.Errorf("user:user without /etc/group: %+v, %v", u, err)
	}
}

func TestChown(t *testing.T) {
	tests := []struct {
		spec     string
		uid, gid uint32
	}{
		{"1000", 1000, 1000}, // a uid alone is also the gid
		{"1000:50", 1000, 50},
		{"app", 1234, 1234}, // so is a named user's uid, not its primary gid
		{"app:staff", 1234, 50},
		{"user", SandboxUID, SandboxUID},
		{"4321", 4321, 4321},
	}
	for _, tc := range tests {
		uid, gid, err := Chown(tc.spec, testDB)
		if err != nil || uid != tc.uid || gid != tc.gid {
			t.Errorf("Chown(%q) = %d:%d, %v; want %d:%d", tc.spec, uid, gid, err, tc.uid, tc.gid)
		}
	}
	for _, bad := range []string{"ghost", "app:nogroup", "app:", "70000"} {
		if _, _, err := Chown(bad, testDB); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Chown(%q): %v, want ErrInvalidArgument", bad, err)
		}
	}
}

// TestGroupsCapped checks that a group file listing a user in thousands
// of groups gives it at most maxGroups.
func TestGroupsCapped(t *testing.T) {
	var b strings.Builder
	for i := range 5000 {
		b.WriteString("g" + strings.Repeat("x", i%7) + ":x:" + strconv.Itoa(2000+i) + ":app\n")
	}
	u, err := Resolve("app", DB{Passwd: testDB.Passwd, Group: []byte(b.String())})
	if err != nil || len(u.Groups) != maxGroups || u.Groups[0] != 2000 {
		t.Errorf("groups: %d, %v", len(u.Groups), err)
	}
}
