package linux

import (
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/agent"
)

func TestResolveAccount(t *testing.T) {
	db := accountDB{
		passwd: []byte("root:x:0:0:root:/root:/bin/bash\n" +
			"node:x:1000:1000::/home/node:/bin/sh\n" +
			"odd:x:99999:1:too big:/x:/bin/sh\n" + // unmapped uid: skipped
			"rel:x:200:200::relative/home:/bin/sh\n" +
			"short:x:1\n" +
			"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"),
		group: []byte("root:x:0:\nstaff:x:50:\nbig:x:70000:\n"),
	}
	tests := []struct {
		spec string
		want agent.User
	}{
		{"", sandboxUser},
		{"root", agent.User{Name: "root", UID: 0, GID: 0, Home: "/root"}},
		{"0", agent.User{Name: "root", UID: 0, GID: 0, Home: "/root"}},
		{"node", agent.User{Name: "node", UID: 1000, GID: 1000, Home: "/home/node"}},
		{"1000", agent.User{Name: "node", UID: 1000, GID: 1000, Home: "/home/node"}},
		{"user", sandboxUser}, // not in the image: the sandbox's own
		{"nobody:staff", agent.User{Name: "nobody", UID: 65534, GID: 50, Home: "/nonexistent"}},
		{"rel", agent.User{Name: "rel", UID: 200, GID: 200, Home: "/"}},
		{"4321:4321", agent.User{Name: "4321", UID: 4321, GID: 4321, Home: "/"}},
	}
	for _, tc := range tests {
		got, err := resolveAccount(tc.spec, db)
		if err != nil || got != tc.want {
			t.Errorf("resolveAccount(%q) = %+v, %v; want %+v", tc.spec, got, err, tc.want)
		}
	}
	for spec, msg := range map[string]string{
		"odd":        "not in the image's /etc/passwd",
		"short":      "not in the image's /etc/passwd",
		"99999":      "uid must be between",
		"node:big":   `group "big" is not in`,
		"node:":      "want name, uid",
		":staff":     "want name, uid",
		"node:ghost": `group "ghost" is not in`,
	} {
		if _, err := resolveAccount(spec, db); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("resolveAccount(%q) = %v, want an error saying %q", spec, err, msg)
		}
	}
	// Without account files only the sandbox's own accounts and ids exist.
	if u, err := resolveAccount("root", accountDB{}); err != nil || u != sandboxRoot {
		t.Errorf("root without /etc/passwd: %+v, %v", u, err)
	}
	users, def := agentUsers(agent.User{Name: "node", UID: 1000, GID: 1000, Home: "/home/node"})
	if def != "node" || len(users) != 3 || users["user"] != sandboxUser || users["root"] != sandboxRoot {
		t.Errorf("agentUsers = %v, %q", users, def)
	}
}
