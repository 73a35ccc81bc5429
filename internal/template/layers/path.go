package layers

import (
	"fmt"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// maxNameLen is the longest file name component Linux accepts.
const maxNameLen = 255

// cleanEntryPath turns the name of a tar entry into a slash-separated path
// relative to the layer root, or "" for the root itself. Empty and "."
// components are dropped ("./usr//bin/" is "usr/bin"); absolute paths, ".."
// components, NUL bytes, components longer than 255 bytes and names longer
// than maxLen are rejected with ErrInvalidArgument. The result never
// starts with "/" and never contains "..", so joining it to any directory
// stays below that directory (symlinks aside, which the unpacker refuses
// to follow).
func cleanEntryPath(name string, maxLen int) (string, error) {
	if name == "" {
		return "", fmt.Errorf("empty entry name: %w", errdefs.ErrInvalidArgument)
	}
	if len(name) > maxLen {
		return "", fmt.Errorf("entry name longer than %d bytes: %w", maxLen, errdefs.ErrInvalidArgument)
	}
	if strings.IndexByte(name, 0) >= 0 {
		return "", fmt.Errorf("entry name %q contains a NUL byte: %w", quoteName(name), errdefs.ErrInvalidArgument)
	}
	if name[0] == '/' {
		return "", fmt.Errorf("entry %q: absolute paths are not allowed: %w", quoteName(name), errdefs.ErrInvalidArgument)
	}
	parts := strings.Split(name, "/")
	out := parts[:0]
	for _, p := range parts {
		switch p {
		case "", ".":
			continue
		case "..":
			return "", fmt.Errorf("entry %q: \"..\" is not allowed: %w", quoteName(name), errdefs.ErrInvalidArgument)
		}
		if len(p) > maxNameLen {
			return "", fmt.Errorf("entry %q: name component longer than %d bytes: %w", quoteName(name), maxNameLen, errdefs.ErrInvalidArgument)
		}
		out = append(out, p)
	}
	return strings.Join(out, "/"), nil
}

// splitPath splits a cleaned entry path into its parent ("" for the root)
// and its last component.
func splitPath(p string) (dir, base string) {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return "", p
	}
	return p[:i], p[i+1:]
}

// quoteName shortens an entry name for error messages.
func quoteName(s string) string {
	const n = 120
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
