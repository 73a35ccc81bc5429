package linux

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agent"
)

// Limits of the account lookup. A template's /etc/passwd is read before
// anything runs in the sandbox, but it is still the template's content:
// the lookup reads at most maxAccountFile bytes of a regular file.
const (
	maxAccountFile = 4 << 20
	// maxAccountID is the highest uid or gid a sandbox maps (its user
	// namespace maps 0-65535).
	maxAccountID = 65535
)

// The two accounts every sandbox has, whatever its /etc/passwd says.
var (
	sandboxUser = agent.User{Name: "user", UID: sandboxUserUID, GID: sandboxUserGID, Home: sandboxHome}
	sandboxRoot = agent.User{Name: "root", UID: 0, GID: 0, Home: "/root"}
)

// accountDB is what resolveAccount reads: the root filesystem's
// /etc/passwd and /etc/group. Either may be nil.
type accountDB struct {
	passwd, group []byte
}

// readAccountDB reads /etc/passwd and /etc/group inside the directory
// rootFD as if it were "/" (symlinks cannot leave it). A file that is
// missing or not a regular file counts as empty.
func readAccountDB(rootFD int) (accountDB, error) {
	var db accountDB
	for _, f := range []struct {
		path string
		dst  *[]byte
	}{{"/etc/passwd", &db.passwd}, {"/etc/group", &db.group}} {
		b, err := readSmallFileIn(rootFD, f.path, maxAccountFile)
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

// resolveAccount returns the account a sandbox's processes run as by
// default, from spec (an image's USER: "name", "uid", "name:group",
// "uid:gid"), as Docker does: names are looked up in /etc/passwd and
// /etc/group; a uid without an entry gets gid 0 and home "/". The names
// "user" and "root" and their ids fall back to the sandbox's own two
// accounts when the image does not define them. Empty spec means "user".
func resolveAccount(spec string, db accountDB) (agent.User, error) {
	if spec == "" {
		return sandboxUser, nil
	}
	name, group, hasGroup := strings.Cut(spec, ":")
	if name == "" || (hasGroup && group == "") {
		return agent.User{}, fmt.Errorf("user %q: want name, uid, name:group or uid:gid", spec)
	}
	u, err := lookupUser(name, db.passwd)
	if err != nil {
		return agent.User{}, err
	}
	if hasGroup {
		gid, err := lookupGroup(group, db.group)
		if err != nil {
			return agent.User{}, err
		}
		u.GID = gid
	}
	return u, nil
}

// lookupUser finds name (a user name or a uid) in passwd.
func lookupUser(name string, passwd []byte) (agent.User, error) {
	uid, numeric := parseAccountID(name)
	var found *agent.User
	eachEntry(passwd, 7, func(f [][]byte) bool {
		if (numeric && string(f[2]) == name) || (!numeric && string(f[0]) == name) {
			u, ok := passwdUser(f)
			if ok {
				found = &u
				return false
			}
		}
		return true
	})
	switch {
	case found != nil:
		return *found, nil
	case name == sandboxRoot.Name || (numeric && uid == sandboxRoot.UID):
		return sandboxRoot, nil
	case name == sandboxUser.Name || (numeric && uid == sandboxUser.UID):
		return sandboxUser, nil
	case numeric:
		return agent.User{Name: name, UID: uid, GID: 0, Home: "/"}, nil
	}
	if _, err := strconv.Atoi(name); err == nil {
		return agent.User{}, fmt.Errorf("user %q: uid must be between 0 and %d", name, maxAccountID)
	}
	return agent.User{}, fmt.Errorf("user %q is not in the image's /etc/passwd", name)
}

// passwdUser makes an account of a passwd entry's fields, or reports
// false when its ids are not numbers the sandbox maps.
func passwdUser(f [][]byte) (agent.User, bool) {
	uid, ok1 := parseAccountID(string(f[2]))
	gid, ok2 := parseAccountID(string(f[3]))
	if !ok1 || !ok2 || len(f[0]) == 0 {
		return agent.User{}, false
	}
	home := string(f[5])
	if !strings.HasPrefix(home, "/") || strings.IndexByte(home, 0) >= 0 {
		home = "/"
	}
	return agent.User{Name: string(f[0]), UID: uid, GID: gid, Home: home}, true
}

// lookupGroup finds group (a group name or a gid) in the group file.
func lookupGroup(group string, groups []byte) (uint32, error) {
	if gid, ok := parseAccountID(group); ok {
		return gid, nil
	}
	var gid uint32
	found := false
	eachEntry(groups, 4, func(f [][]byte) bool {
		if string(f[0]) == group {
			gid, found = parseAccountID(string(f[2]))
			return !found
		}
		return true
	})
	switch {
	case found:
		return gid, nil
	case group == sandboxRoot.Name:
		return sandboxRoot.GID, nil
	case group == sandboxUser.Name:
		return sandboxUser.GID, nil
	}
	return 0, fmt.Errorf("group %q is not in the image's /etc/group", group)
}

// eachEntry calls fn with the colon-separated fields of every line of b
// that has at least n fields, until fn returns false. Comments and
// malformed lines are skipped.
func eachEntry(b []byte, n int, fn func([][]byte) bool) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), maxAccountFile)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		f := bytes.Split(line, []byte(":"))
		if len(f) < n {
			continue
		}
		if !fn(f) {
			return
		}
	}
}

// parseAccountID parses a decimal uid or gid the sandbox maps.
func parseAccountID(s string) (uint32, bool) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n > maxAccountID || strconv.FormatUint(n, 10) != s {
		return 0, false
	}
	return uint32(n), true
}

// agentUsers returns the accounts the agent serves and the default one:
// "user" and "root", plus def under its own name when it is neither.
// An image that defines "user" or "root" itself replaces that account.
func agentUsers(def agent.User) (map[string]agent.User, string) {
	users := map[string]agent.User{sandboxUser.Name: sandboxUser, sandboxRoot.Name: sandboxRoot}
	users[def.Name] = def
	return users, def.Name
}
