package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCLIFilesUser: cp and files ls/mkdir/rm take -u (and --user) and
// act as that user. On the fake runtime the agent does not switch ids,
// so the user shows in where relative paths start: /root for root,
// /home/user by default.
func TestCLIFilesUser(t *testing.T) {
	e := newCLIEnv(t)
	id := e.create()
	ctx := context.Background()
	src := filepath.Join(t.TempDir(), "f.txt")
	if err := os.WriteFile(src, []byte("root's"), 0o644); err != nil {
		t.Fatal(err)
	}

	e.ok("", "cp", "-u", "root", src, id+":rel.txt")
	if fi, err := e.mgr.Stat(ctx, id, "/root/rel.txt"); err != nil || fi.Size != 6 {
		t.Fatalf("cp -u root: /root/rel.txt %+v, %v", fi, err)
	}
	e.ok("", "cp", src, id+":rel.txt")
	if _, err := e.mgr.Stat(ctx, id, "/home/user/rel.txt"); err != nil {
		t.Fatalf("cp as the default user: %v", err)
	}
	if out := e.ok("", "cp", "--user", "root", id+":rel.txt", "-").stdout; out != "root's" {
		t.Errorf("cp --user root download: %q", out)
	}
	e.ok("", "cp", "-u", "root", "-", id+":stdin.txt")
	if _, err := e.mgr.Stat(ctx, id, "/root/stdin.txt"); err != nil {
		t.Errorf("cp -u root from stdin: %v", err)
	}
	dst := t.TempDir()
	e.ok("", "cp", "-u", "root", id+":rel.txt", dst)
	if b, err := os.ReadFile(filepath.Join(dst, "rel.txt")); err != nil || string(b) != "root's" {
		t.Errorf("cp -u root download to a directory: %q, %v", b, err)
	}

	e.ok("", "files", "mkdir", "-u", "root", id, "made")
	if fi, err := e.mgr.Stat(ctx, id, "/root/made"); err != nil || fi.Type != "dir" {
		t.Fatalf("files mkdir -u root: %+v, %v", fi, err)
	}
	if out := e.ok("", "files", "ls", "-u", "root", id).stdout; !strings.Contains(out, "made") || !strings.Contains(out, "stdin.txt") {
		t.Errorf("files ls -u root lists %q", out)
	}
	if out := e.ok("", "files", "ls", id).stdout; strings.Contains(out, "made") {
		t.Errorf("files ls (the user's home) lists root's %q", out)
	}
	e.ok("", "files", "rm", "-u", "root", id, "made")
	if _, err := e.mgr.Stat(ctx, id, "/root/made"); err == nil {
		t.Error("files rm -u root left /root/made")
	}

	for _, args := range [][]string{
		{"cp", "-u", "admin", src, id + ":x"},
		{"files", "ls", "-u", "admin", id},
		{"files", "mkdir", "-u", "admin", id, "d"},
		{"files", "rm", "-u", "admin", id, "d"},
	} {
		r := e.run("", args...)
		if r.code != 2 || r.err == nil || !strings.Contains(r.err.Error(), "-u must be user or root") {
			t.Errorf("airlock %s: code %d, err %v", strings.Join(args, " "), r.code, r.err)
		}
	}
}
