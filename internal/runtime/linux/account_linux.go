package linux

import (
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/account"
	"github.com/airlock-sandbox/airlock/internal/agent"
)

// readAccountDB reads /etc/passwd and /etc/group inside the directory
// rootFD as if it were "/" (symlinks cannot leave it). A template's
// account files are read before anything runs in the sandbox, but they
// are still the template's content: at most account.MaxFile bytes of a
// regular file each. A file that is missing or not a regular file counts
// as empty.
func readAccountDB(rootFD int) (account.DB, error) {
	var db account.DB
	for _, f := range []struct {
		path string
		dst  *[]byte
	}{{"/etc/passwd", &db.Passwd}, {"/etc/group", &db.Group}} {
		b, err := readSmallFileIn(rootFD, f.path, account.MaxFile)
		if err != nil {
			return db, err
		}
		*f.dst = b
	}
	return db, nil
}

// readSmallFileIn returns the content of the regular file at path inside
// rootFD, or nil when there is none. O_NONBLOCK keeps a FIFO from
// blocking the open; fstat then rejects it.
func readSmallFileIn(rootFD int, path string, max int64) ([]byte, error) {
	fd, err := openIn(rootFD, path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		return nil, nil
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return nil, nil
	}
	if fi.Size() > max {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, max)
	}
	return io.ReadAll(io.LimitReader(f, max))
}

// defaultAccount returns the account a sandbox's processes run as by
// default: the image's USER (spec) resolved in db, or the sandbox's own
// "user" when the image sets none (E2B's default).
func defaultAccount(spec string, db account.DB) (agent.User, error) {
	if spec == "" {
		return account.SandboxUser, nil
	}
	return account.Resolve(spec, db)
}

// agentUsers returns the accounts the agent serves and the default one:
// "user" and "root", plus def under its own name when it is neither.
// An image that defines "user" or "root" itself replaces that account.
func agentUsers(def agent.User) (map[string]agent.User, string) {
	users := map[string]agent.User{account.SandboxUser.Name: account.SandboxUser, account.Root.Name: account.Root}
	users[def.Name] = def
	return users, def.Name
}
