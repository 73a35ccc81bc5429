package template

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// etcFingerprint hashes what copyEtc would look at in src, without reading
// any file: the name, mode, size, modification time and inode of every
// entry etcDenied allows (a denied one, a credential, neither costs a
// rebuild nor shows in the result). Two equal fingerprints mean the copies
// would be equal, unless a file was rewritten within the file system's
// time granularity and kept its size.
func etcFingerprint(ctx context.Context, src string) (string, error) {
	h := sha256.New()
	entries := 0
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if cerr := ctx.Err(); cerr != nil {
			return ctxClass(cerr)
		}
		rel, rerr := filepath.Rel(src, p)
		if rerr != nil {
			return rerr
		}
		rel = filepath.ToSlash(rel)
		if err != nil {
			if errors.Is(err, fs.ErrPermission) && p != src {
				fmt.Fprintf(h, "%s\x00unreadable\n", rel)
				return skipEntry(d)
			}
			return fmt.Errorf("host etc: %w", err)
		}
		if rel != "." && etcDenied(rel) {
			return skipEntry(d)
		}
		entries++
		if entries > maxEtcEntries {
			return fmt.Errorf("host etc has more than %d entries: %w", maxEtcEntries, errdefs.ErrResourceExhausted)
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil // removed while walking
		}
		if err != nil {
			return err
		}
		var ino uint64
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			ino = st.Ino
		}
		fmt.Fprintf(h, "%s\x00%o\x00%d\x00%d\x00%d\n", rel, uint32(info.Mode()), info.Size(), info.ModTime().UnixNano(), ino)
		return nil
	})
	if err != nil {
		return "", err
	}
	if _, err := os.Lstat(src); err != nil {
		return "", fmt.Errorf("host etc: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
