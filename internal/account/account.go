// Package account resolves the account a sandbox's processes run as from
// a root filesystem's /etc/passwd and /etc/group, by Docker's rules: an
// image's USER with Resolve, a COPY's --chown with Chown. The files are
// the template's content, so parsing never trusts them: malformed lines
// are skipped, ids must be ones a sandbox maps, and the caller reads at
// most MaxFile bytes of each.
package account

import (
	"bufio"
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

const (
	// MaxFile is the most of /etc/passwd or /etc/group a caller should
	// read.
	MaxFile = 4 << 20
	// MaxID is the highest uid or gid a sandbox maps (its user namespace
	// maps 0-65535).
	MaxID = 65535
	// maxGroups caps the supplementary groups of one account.
	maxGroups = 64
)

// User is an account processes run as.
type User struct {
	Name string
	UID  uint32
	GID  uint32
	Home string
	// Groups are the supplementary group ids: the groups of /etc/group
	// that list the user as a member, without its primary group.
	Groups []uint32 `json:",omitempty"`
}

// Equal reports whether u and v are the same account.
func (u User) Equal(v User) bool {
	return u.Name == v.Name && u.UID == v.UID && u.GID == v.GID && u.Home == v.Home && slices.Equal(u.Groups, v.Groups)
}

// The sandbox's own unprivileged account, "user", uid 1000 as in E2B.
const (
	SandboxName = "user"
	SandboxUID  = 1000
	SandboxGID  = 1000
	SandboxHome = "/home/user"
)

// The two accounts every sandbox has, whatever its /etc/passwd says.
var (
	SandboxUser = User{Name: SandboxName, UID: SandboxUID, GID: SandboxGID, Home: SandboxHome}
	Root        = User{Name: "root", UID: 0, GID: 0, Home: "/root"}
)

// DB is the content of a root filesystem's /etc/passwd and /etc/group.
// Either may be nil (no such file).
type DB struct {
	Passwd, Group []byte
}

// Resolve returns the account of spec, an image's USER ("name", "uid",
// "name:group" or "uid:gid"), as Docker does: names are looked up in
// /etc/passwd and /etc/group; a uid without an entry gets gid 0 and home
// "/"; without an explicit group the user also gets the supplementary
// groups that list it. The names "user" and "root" and their ids fall
// back to the sandbox's own two accounts when the image does not define
// them. Errors wrap errdefs.ErrInvalidArgument.
func Resolve(spec string, db DB) (User, error) {
	name, group, hasGroup, err := split(spec)
	if err != nil {
		return User{}, err
	}
	u, err := lookupUser(name, db.Passwd)
	if err != nil {
		return User{}, err
	}
	if hasGroup {
		if u.GID, err = lookupGroup(group, db.Group); err != nil {
			return User{}, err
		}
		u.Groups = nil
		return u, nil
	}
	u.Groups = memberOf(u.Name, u.GID, db.Group)
	return u, nil
}

// Chown returns the owner of spec, a COPY's --chown ("user" or
// "user:group", names or ids), as Docker does: names are looked up like
// Resolve's, and without a group the gid is the uid.
func Chown(spec string, db DB) (uid, gid uint32, err error) {
	name, group, hasGroup, err := split(spec)
	if err != nil {
		return 0, 0, err
	}
	u, err := lookupUser(name, db.Passwd)
	if err != nil {
		return 0, 0, err
	}
	gid = u.UID
	if hasGroup {
		if gid, err = lookupGroup(group, db.Group); err != nil {
			return 0, 0, err
		}
	}
	return u.UID, gid, nil
}

// split splits "name[:group]".
func split(spec string) (name, group string, hasGroup bool, err error) {
	name, group, hasGroup = strings.Cut(spec, ":")
	if name == "" || (hasGroup && group == "") || strings.ContainsAny(spec, "\x00\n") {
		return "", "", false, fmt.Errorf("user %q: want name, uid, name:group or uid:gid: %w", clip(spec), errdefs.ErrInvalidArgument)
	}
	return name, group, hasGroup, nil
}

// lookupUser finds name (a user name or a uid) in passwd.
func lookupUser(name string, passwd []byte) (User, error) {
	uid, numeric := parseID(name)
	var found *User
	eachEntry(passwd, 7, func(f [][]byte) bool {
		if (numeric && string(f[2]) == name) || (!numeric && string(f[0]) == name) {
			if u, ok := passwdUser(f); ok {
				found = &u
				return false
			}
		}
		return true
	})
	switch {
	case found != nil:
		return *found, nil
	case name == Root.Name || (numeric && uid == Root.UID):
		return Root, nil
	case name == SandboxUser.Name || (numeric && uid == SandboxUser.UID):
		return SandboxUser, nil
	case numeric:
		return User{Name: name, UID: uid, GID: 0, Home: "/"}, nil
	}
	if _, err := strconv.Atoi(name); err == nil {
		return User{}, fmt.Errorf("user %q: uid must be between 0 and %d: %w", clip(name), MaxID, errdefs.ErrInvalidArgument)
	}
	return User{}, fmt.Errorf("user %q is not in the image's /etc/passwd: %w", clip(name), errdefs.ErrInvalidArgument)
}

// passwdUser makes an account of a passwd entry's fields, or reports
// false when its ids are not numbers the sandbox maps.
func passwdUser(f [][]byte) (User, bool) {
	uid, ok1 := parseID(string(f[2]))
	gid, ok2 := parseID(string(f[3]))
	if !ok1 || !ok2 || len(f[0]) == 0 {
		return User{}, false
	}
	home := string(f[5])
	if !strings.HasPrefix(home, "/") || strings.IndexByte(home, 0) >= 0 {
		home = "/"
	}
	return User{Name: string(f[0]), UID: uid, GID: gid, Home: home}, true
}

// lookupGroup finds group (a group name or a gid) in the group file.
func lookupGroup(group string, groups []byte) (uint32, error) {
	if gid, ok := parseID(group); ok {
		return gid, nil
	}
	var gid uint32
	found := false
	eachEntry(groups, 4, func(f [][]byte) bool {
		if string(f[0]) == group {
			gid, found = parseID(string(f[2]))
			return !found
		}
		return true
	})
	switch {
	case found:
		return gid, nil
	case group == Root.Name:
		return Root.GID, nil
	case group == SandboxUser.Name:
		return SandboxUser.GID, nil
	}
	return 0, fmt.Errorf("group %q is not in the image's /etc/group: %w", clip(group), errdefs.ErrInvalidArgument)
}

// memberOf returns the gids of the groups that list name as a member,
// except primary, sorted, without repeats, at most maxGroups.
func memberOf(name string, primary uint32, groups []byte) []uint32 {
	var gids []uint32
	eachEntry(groups, 4, func(f [][]byte) bool {
		gid, ok := parseID(string(f[2]))
		if !ok || gid == primary || slices.Contains(gids, gid) {
			return true
		}
		for m := range bytes.SplitSeq(f[3], []byte(",")) {
			if string(m) == name {
				gids = append(gids, gid)
				break
			}
		}
		return len(gids) < maxGroups
	})
	slices.Sort(gids)
	return gids
}

// eachEntry calls fn with the colon-separated fields of every line of b
// that has at least n fields, until fn returns false. Comments and
// malformed lines are skipped.
func eachEntry(b []byte, n int, fn func([][]byte) bool) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), MaxFile)
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

// parseID parses a decimal uid or gid the sandbox maps.
func parseID(s string) (uint32, bool) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n > MaxID || strconv.FormatUint(n, 10) != s {
		return 0, false
	}
	return uint32(n), true
}

// clip shortens s for an error message.
func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}
