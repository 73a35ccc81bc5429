package build

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/account"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// maxSymlinkHops is the most symlinks one path resolution follows (as
// Linux's MAXSYMLINKS).
const maxSymlinkHops = 40

// stack is a read-only view of store layers as overlayfs merges them in
// a sandbox, used to find what COPY and WORKDIR write over: an upper
// entry hides the ones below; a whiteout (character device 0:0) hides
// the entry below; an opaque directory hides the directories below it.
// Lookups never follow a symlink on the host; symlinks in image paths are
// resolved as the sandbox would resolve them, inside the image root.
//
// pending holds the paths the layer being written creates (true for a
// directory); they are looked up before the layers.
type stack struct {
	dirs    []string // layer directories, lowest first
	pending map[string]bool
}

// hit is a merged directory entry: its stat and the layer holding it
// (-1 for the root and for pending entries).
type hit struct {
	st      fileStat
	layer   int
	pending bool
}

func newStack(dirs []string) *stack {
	return &stack{dirs: dirs, pending: make(map[string]bool)}
}

// splitRel splits an image path ("/a/b", "a/b/") into its cleaned
// components; the root has none.
func splitRel(p string) []string {
	c := path.Clean("/" + p)
	if c == "/" {
		return nil
	}
	return strings.Split(c[1:], "/")
}

// joinRel joins relative path components ("" is the root).
func joinRel(parts ...string) string {
	var nonEmpty []string
	for _, p := range parts {
		if p != "" {
			nonEmpty = append(nonEmpty, p)
		}
	}
	return strings.Join(nonEmpty, "/")
}

// lookup returns the merged entry at rel (clean, relative; "" is the
// root), whose ancestors must be directories in the merged view (resolve
// takes care of symlinks). found is false when there is no such entry or
// an ancestor is not a directory.
func (s *stack) lookup(rel string) (h hit, found bool, err error) {
	if rel == "" {
		return hit{st: fileStat{typ: typDir, perm: 0o755}, layer: -1}, true, nil
	}
	if isDir, ok := s.pending[rel]; ok {
		h := hit{layer: -1, pending: true, st: fileStat{typ: typReg}}
		if isDir {
			h.st.typ = typDir
		}
		return h, true, nil
	}
	comps := strings.Split(rel, "/")
	visible := make([]int, len(s.dirs))
	for i := range visible {
		visible[i] = len(s.dirs) - 1 - i // top first
	}
	for i := range comps {
		prefix := strings.Join(comps[:i+1], "/")
		if isDir, ok := s.pending[prefix]; ok && !isDir {
			return hit{}, false, nil // below a file this layer writes
		}
		var next []int
		found = false
		for _, li := range visible {
			st, err := statInLayer(s.dirs[li], prefix)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return hit{}, false, err
			}
			if st.isWhiteout() {
				break // hides this name in every layer below
			}
			if !found {
				found, h = true, hit{st: st, layer: li}
				if !st.isDir() {
					break
				}
			} else if !st.isDir() {
				break // a directory above hides a non-directory below
			}
			next = append(next, li)
			if opaqueInLayer(s.dirs[li], prefix) {
				break
			}
		}
		if !found || (i < len(comps)-1 && !h.st.isDir()) {
			return hit{}, false, nil
		}
		visible = next
	}
	return h, true, nil
}

// errNotDir reports a path whose parent is not a directory.
func errNotDir(p string) error {
	return fmt.Errorf("%q is not a directory in the image: %w", clip(p, 200), errdefs.ErrInvalidArgument)
}

// resolve resolves the image path p (absolute, or relative to the root)
// like the kernel would inside the sandbox: symlinks in every component
// but the last are followed (the last too if followLast), ".." never
// climbs above the root. It returns the resolved path (relative, clean)
// and the entry there, or found false when it does not exist (then the
// path is that of the missing entry: the resolved existing part plus the
// rest as written). A component below a non-directory is an error.
func (s *stack) resolve(p string, followLast bool) (rel string, h hit, found bool, err error) {
	comps := splitRel(p)
	cur := ""
	hops := 0
	for i := 0; i < len(comps); i++ {
		cand := joinRel(cur, comps[i])
		last := i == len(comps)-1
		h, found, err := s.lookup(cand)
		if err != nil {
			return "", hit{}, false, err
		}
		if !found {
			return joinRel(append([]string{cur}, comps[i:]...)...), hit{}, false, nil
		}
		if h.st.isSymlink() && !h.pending && (!last || followLast) {
			if hops++; hops > maxSymlinkHops {
				return "", hit{}, false, fmt.Errorf("%q: too many levels of symbolic links in the image: %w", clip(p, 200), errdefs.ErrInvalidArgument)
			}
			target, err := readlinkInLayer(s.dirs[h.layer], cand)
			if err != nil {
				return "", hit{}, false, err
			}
			next := target
			if !path.IsAbs(target) {
				next = path.Join("/", cur, target)
			}
			comps = splitRel(path.Join(append([]string{"/", next}, comps[i+1:]...)...))
			cur, i = "", -1
			continue
		}
		if !last && !h.st.isDir() {
			return "", hit{}, false, errNotDir("/" + cand)
		}
		cur = cand
		if last {
			return cur, h, true, nil
		}
	}
	h, _, err = s.lookup("")
	return "", h, true, err
}

// readFile returns the content of the image file p (at most
// account.MaxFile bytes), or fs.ErrNotExist.
func (s *stack) readFile(p string) ([]byte, error) {
	rel, h, found, err := s.resolve(p, true)
	if err != nil {
		return nil, err
	}
	if !found || h.pending || h.layer < 0 || !h.st.isRegular() {
		return nil, fs.ErrNotExist
	}
	f, err := openFileInLayer(s.dirs[h.layer], rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, account.MaxFile+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", p, errdefs.ErrInternal)
	}
	if len(b) > account.MaxFile {
		return nil, fmt.Errorf("%s is larger than %d bytes: %w", p, account.MaxFile, errdefs.ErrResourceExhausted)
	}
	return b, nil
}

// accountDB reads the image's /etc/passwd and /etc/group; a missing one
// is empty.
func (s *stack) accountDB() (account.DB, error) {
	var db account.DB
	for _, f := range []struct {
		path string
		dst  *[]byte
	}{{"/etc/passwd", &db.Passwd}, {"/etc/group", &db.Group}} {
		b, err := s.readFile(f.path)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return db, err
		}
		*f.dst = b
	}
	return db, nil
}
