package linux

import (
	"testing"

	"github.com/airlock-sandbox/airlock/internal/account"
	"github.com/airlock-sandbox/airlock/internal/agent"
)

func TestDefaultAccount(t *testing.T) {
	// No USER: the sandbox's own "user", whatever the image defines.
	db := account.DB{Passwd: []byte("user:x:5:5::/x:/bin/sh\n")}
	if u, err := defaultAccount("", db); err != nil || !u.Equal(account.SandboxUser) {
		t.Errorf("no USER: %+v, %v", u, err)
	}
	if u, err := defaultAccount("user", db); err != nil || u.UID != 5 {
		t.Errorf("USER user with an image entry: %+v, %v", u, err)
	}
	node := agent.User{Name: "node", UID: 1000, GID: 1000, Home: "/home/node"}
	users, def := agentUsers(node)
	if def != "node" || len(users) != 3 || !users["user"].Equal(account.SandboxUser) || !users["root"].Equal(account.Root) {
		t.Errorf("agentUsers = %v, %q", users, def)
	}
}
