package template

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Limits of the curated /etc copy. Files above maxEtcFileBytes are skipped;
// an /etc above maxEtcTotalBytes or maxEtcEntries fails the build rather
// than filling the cache.
const (
	maxEtcFileBytes  = 4 << 20
	maxEtcTotalBytes = 128 << 20
	maxEtcEntries    = 50000
)

// etcDenyNames are name patterns (path.Match syntax) never copied from the
// host's /etc, at any depth: a path is denied when any of its components
// matches, so a matching directory is skipped whole.
var etcDenyNames = []string{
	"shadow*", "gshadow*", "passwd-", "group-", "passwd.*", "group.*",
	"sudoers*", "subuid*", "subgid*", ".pwd.lock", "opasswd",
	"machine-id", "mtab", "fstab", "crypttab",
	"*.key", "*.keytab", "*.p12", "*.pfx", "*.jks", "*.secret", "*.secrets",
	"id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*",
	"credstore*", "private", "auth.conf", "auth.conf.d",
	".git", ".etckeeper",
}

// etcDenyDirs are paths relative to /etc that are never copied, with
// everything under them: credentials, container engines' and
// orchestrators' configuration, VPN and network secrets.
var etcDenyDirs = []string{
	"ssh", "ssl/private", "pki/tls/private", "security/opasswd",
	"docker", "containerd", "kubernetes", "rancher", "k3s", "cni", "crio",
	"containers/auth.json", "airlock", "wireguard", "openvpn", "ipsec.d",
	"NetworkManager/system-connections", "netplan", "ppp", "letsencrypt",
	"sssd", "libvirt", "cloud", "vault.d", "consul.d", "nomad.d",
	"polkit-1/localauthority", "audit", "apparmor.d/local",
}

// etcDenied reports whether rel (a slash-separated path relative to /etc)
// must not be copied.
func etcDenied(rel string) bool {
	for _, part := range strings.Split(rel, "/") {
		for _, pat := range etcDenyNames {
			if ok, _ := path.Match(pat, part); ok {
				return true
			}
		}
	}
	for _, d := range etcDenyDirs {
		if rel == d || strings.HasPrefix(rel, d+"/") {
			return true
		}
	}
	return false
}

// copyStats counts what copyEtc did.
type copyStats struct {
	files, dirs, links, skipped int
	bytes                       int64
}

// copyEtc copies the world-readable part of src into dst (which must not
// exist): directories that others may read and enter, regular files that
// others may read, and symlinks (as symlinks, never followed). Everything
// etcDenied names, every other file type and files above maxEtcFileBytes
// are skipped. Permission bits are kept; set-id bits and ownership are
// not.
func copyEtc(ctx context.Context, src, dst string, log *slog.Logger) (copyStats, error) {
	var st copyStats
	fi, err := os.Lstat(src)
	if err != nil {
		return st, fmt.Errorf("host etc: %w", err)
	}
	if !fi.IsDir() {
		return st, fmt.Errorf("host etc %s is not a directory: %w", src, errdefs.ErrFailedPrecondition)
	}
	if err := mkdirMode(dst, 0o755); err != nil {
		return st, err
	}
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if cerr := ctx.Err(); cerr != nil {
			return ctxClass(cerr)
		}
		if p == src {
			return err
		}
		rel, rerr := filepath.Rel(src, p)
		if rerr != nil {
			return rerr
		}
		rel = filepath.ToSlash(rel)
		if err != nil {
			// An unreadable directory: keep what was copied, skip the rest.
			if errors.Is(err, fs.ErrPermission) {
				st.skipped++
				return skipEntry(d)
			}
			return err
		}
		if st.files+st.dirs+st.links >= maxEtcEntries {
			return fmt.Errorf("host etc has more than %d entries: %w", maxEtcEntries, errdefs.ErrResourceExhausted)
		}
		if etcDenied(rel) {
			st.skipped++
			return skipEntry(d)
		}
		info, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while walking
			}
			return err
		}
		target := filepath.Join(dst, filepath.FromSlash(rel))
		mode := info.Mode()
		switch {
		case mode&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := os.Symlink(link, target); err != nil {
				return err
			}
			st.links++
		case mode.IsDir():
			if mode.Perm()&0o005 != 0o005 {
				st.skipped++
				return fs.SkipDir
			}
			if err := mkdirMode(target, mode.Perm()); err != nil {
				return err
			}
			st.dirs++
		case mode.IsRegular():
			if mode.Perm()&0o004 == 0 {
				st.skipped++
				return nil
			}
			if info.Size() > maxEtcFileBytes {
				log.Debug("skipping large file", "path", rel, "bytes", info.Size())
				st.skipped++
				return nil
			}
			n, err := copyRegular(p, target, mode.Perm())
			if err != nil {
				return fmt.Errorf("copy %s: %w", rel, err)
			}
			st.files++
			st.bytes += n
			if st.bytes > maxEtcTotalBytes {
				return fmt.Errorf("host etc is larger than %d bytes: %w", maxEtcTotalBytes, errdefs.ErrResourceExhausted)
			}
		default:
			st.skipped++ // devices, fifos, sockets
		}
		return nil
	})
	return st, err
}

// skipEntry returns the WalkDir result that skips d.
func skipEntry(d fs.DirEntry) error {
	if d != nil && d.IsDir() {
		return fs.SkipDir
	}
	return nil
}

// copyRegular copies the regular file src to dst with mode perm. It opens
// src without following symlinks and re-checks, on the open file, that it
// is still a world-readable regular file no larger than the cap, so a
// file swapped after the walk looked at it is not copied.
func copyRegular(src, dst string, perm fs.FileMode) (int64, error) {
	in, err := os.OpenFile(src, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return 0, err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o004 == 0 {
		return 0, fmt.Errorf("changed while copying: %w", errdefs.ErrFailedPrecondition)
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(out, io.LimitReader(in, maxEtcFileBytes))
	if err == nil {
		err = out.Chmod(perm)
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return n, err
}

// etcOverrides replace (or create) files of the curated /etc: accounts
// that match the agent's users, no host names, no network.
var etcOverrides = []struct {
	name, content string
}{
	{"passwd", "root:x:0:0:root:/root:/bin/bash\n" +
		"user:x:1000:1000::/home/user:/bin/bash\n" +
		"nobody:x:65534:65534::/nonexistent:/usr/sbin/nologin\n"},
	{"group", "root:x:0:\nuser:x:1000:\nnogroup:x:65534:\n"},
	{"hostname", "sandbox\n"},
	{"hosts", "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"},
	{"resolv.conf", ""},
}

// writeEtcOverrides writes etcOverrides into etc, replacing whatever the
// copy put there (including symlinks).
func writeEtcOverrides(etc string) error {
	for _, o := range etcOverrides {
		p := filepath.Join(etc, o.name)
		if err := os.RemoveAll(p); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(o.content), 0o600); err != nil {
			return err
		}
		if err := os.Chmod(p, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// ctxClass maps a context error onto an error class.
func ctxClass(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("building skeleton: %w", errdefs.ErrTimeout)
	}
	return fmt.Errorf("building skeleton: %w", errdefs.ErrCanceled)
}
