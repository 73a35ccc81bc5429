package debian

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/account"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

func TestValidate(t *testing.T) {
	ok := Options{Suite: "bookworm", Packages: []string{"python3", "python3-pandas", "libstdc++6", "g++", "lib.x", "pkg=1:2.0-3~bpo1"}}
	tests := []struct {
		name string
		mod  func(*Options)
		bad  bool
	}{
		{"valid", func(*Options) {}, false},
		{"no packages", func(o *Options) { o.Packages = nil }, false},
		{"stable", func(o *Options) { o.Suite = "stable" }, false},
		{"empty suite", func(o *Options) { o.Suite = "" }, true},
		{"suite option", func(o *Options) { o.Suite = "--variant=extract" }, true},
		{"suite upper", func(o *Options) { o.Suite = "Bookworm" }, true},
		{"suite path", func(o *Options) { o.Suite = "../x" }, true},
		{"suite space", func(o *Options) { o.Suite = "bookworm main" }, true},
		{"suite long", func(o *Options) { o.Suite = strings.Repeat("a", 33) }, true},
		{"package option", func(o *Options) { o.Packages = []string{"--hook-dir=/x"} }, true},
		{"package dash", func(o *Options) { o.Packages = []string{"-x"} }, true},
		{"package comma", func(o *Options) { o.Packages = []string{"a,b"} }, true},
		{"package pattern", func(o *Options) { o.Packages = []string{"?priority(required)"} }, true},
		{"package arch", func(o *Options) { o.Packages = []string{"libc6:i386"} }, true},
		{"package one char", func(o *Options) { o.Packages = []string{"a"} }, true},
		{"package upper", func(o *Options) { o.Packages = []string{"Python3"} }, true},
		{"package space", func(o *Options) { o.Packages = []string{"a b"} }, true},
		{"package empty", func(o *Options) { o.Packages = []string{""} }, true},
		{"package bad version", func(o *Options) { o.Packages = []string{"a1=x y"} }, true},
		{"package empty version", func(o *Options) { o.Packages = []string{"a1="} }, true},
		{"too many packages", func(o *Options) {
			o.Packages = nil
			for i := range MaxPackages + 1 {
				o.Packages = append(o.Packages, fmt.Sprintf("pkg%d", i))
			}
		}, true},
		{"https mirror", func(o *Options) { o.Mirror = "https://mirror.example.org:8443/debian/" }, false},
		{"ipv6 mirror", func(o *Options) { o.Mirror = "http://[::1]:3142/debian" }, false},
		{"ftp mirror", func(o *Options) { o.Mirror = "ftp://ftp.debian.org/debian" }, true},
		{"file mirror", func(o *Options) { o.Mirror = "file:///srv/mirror" }, true},
		{"mirror no scheme", func(o *Options) { o.Mirror = "deb.debian.org/debian" }, true},
		{"mirror sources line", func(o *Options) { o.Mirror = "deb http://x/ sid main" }, true},
		{"mirror space", func(o *Options) { o.Mirror = "http://x/a b" }, true},
		{"mirror newline", func(o *Options) { o.Mirror = "http://x/a\ndeb http://evil/ sid main" }, true},
		{"mirror credentials", func(o *Options) { o.Mirror = "http://u:p@x/debian" }, true},
		{"mirror query", func(o *Options) { o.Mirror = "http://x/debian?a=b" }, true},
		{"mirror bracket option", func(o *Options) { o.Mirror = "http://x/[trusted=yes]" }, true},
		{"security mirror bad", func(o *Options) { o.SecurityMirror = "-x" }, true},
		{"variant minbase", func(o *Options) { o.Variant = "minbase" }, false},
		{"variant extract", func(o *Options) { o.Variant = "extract" }, true},
		{"variant bogus", func(o *Options) { o.Variant = "apt --x" }, true},
		{"negative timeout", func(o *Options) { o.Timeout = -time.Second }, true},
		{"target abs", func(o *Options) { o.Target = "/var/lib/airlock/x" }, false},
		{"target relative", func(o *Options) { o.Target = "x" }, true},
		{"target unclean", func(o *Options) { o.Target = "/a/../b" }, true},
		{"target root", func(o *Options) { o.Target = "/" }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := ok
			o.Packages = slices.Clone(ok.Packages)
			tt.mod(&o)
			err := o.Validate()
			if tt.bad {
				if !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Fatalf("Validate() = %v, want ErrInvalidArgument", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Validate() = %v, want nil", err)
			}
		})
	}
}

func TestArgs(t *testing.T) {
	o := Options{Suite: "bookworm", Packages: []string{"python3-numpy", "python3", "python3-numpy"}}
	got := Args(o, "/tmp/x/rootfs")
	want := []string{
		"--mode=root", "--format=directory", "--variant=apt", "--verbose",
		`--aptopt=Acquire::Languages "none"`,
		"--include=python3,python3-numpy",
		"--dpkgopt=path-exclude=/usr/share/doc/*",
		"--dpkgopt=path-include=/usr/share/doc/*/copyright",
		"--dpkgopt=path-exclude=/usr/share/man/*",
		"--dpkgopt=path-exclude=/usr/share/info/*",
		"--dpkgopt=path-exclude=/usr/share/locale/*",
		"--dpkgopt=path-include=/usr/share/locale/locale.alias",
		"--", "bookworm", "/tmp/x/rootfs",
		"deb http://deb.debian.org/debian bookworm main",
		"deb http://deb.debian.org/debian bookworm-updates main",
		"deb http://deb.debian.org/debian-security bookworm-security main",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Args =\n%q\nwant\n%q", got, want)
	}
	if o.Packages[0] != "python3-numpy" {
		t.Fatalf("Args modified the caller's package list: %q", o.Packages)
	}

	// sid has no updates or security suites; no packages means no
	// --include; KeepDocs drops the dpkg excludes.
	got = Args(Options{Suite: "sid", Variant: "essential", KeepDocs: true, Mirror: "https://m.example/debian"}, "/r")
	want = []string{
		"--mode=root", "--format=directory", "--variant=essential", "--verbose",
		`--aptopt=Acquire::Languages "none"`,
		"--", "sid", "/r", "deb https://m.example/debian sid main",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Args =\n%q\nwant\n%q", got, want)
	}
}

func TestCacheKey(t *testing.T) {
	base := Options{Suite: "bookworm", Packages: []string{"python3", "python3-pandas"}}
	key := CacheKey(base)
	if len(key) != 64 {
		t.Fatalf("CacheKey = %q, want 64 hex digits", key)
	}
	same := []Options{
		{Suite: "bookworm", Packages: []string{"python3-pandas", "python3"}},
		{Suite: "bookworm", Packages: []string{"python3", "python3-pandas", "python3"}},
		{Suite: "bookworm", Packages: []string{"python3", "python3-pandas"}, Mirror: DefaultMirror, Variant: DefaultVariant},
		{Suite: "bookworm", Packages: []string{"python3", "python3-pandas"}, Target: "/x", Timeout: time.Minute, Binary: "/bin/true"},
	}
	for i, o := range same {
		if got := CacheKey(o); got != key {
			t.Errorf("same[%d]: CacheKey = %s, want %s", i, got, key)
		}
	}
	different := []Options{
		{Suite: "trixie", Packages: []string{"python3", "python3-pandas"}},
		{Suite: "bookworm", Packages: []string{"python3"}},
		{Suite: "bookworm", Packages: []string{"python3", "python3-pandas", "python3-numpy"}},
		{Suite: "bookworm", Packages: []string{"python3,python3-pandas"}},
		{Suite: "bookworm", Packages: []string{"python3", "python3-pandas"}, Mirror: "http://other/debian"},
		{Suite: "bookworm", Packages: []string{"python3", "python3-pandas"}, SecurityMirror: "http://other/debian-security"},
		{Suite: "bookworm", Packages: []string{"python3", "python3-pandas"}, Variant: "minbase"},
		{Suite: "bookworm", Packages: []string{"python3", "python3-pandas"}, KeepDocs: true},
	}
	seen := map[string]int{key: -1}
	for i, o := range different {
		got := CacheKey(o)
		if j, dup := seen[got]; dup {
			t.Errorf("different[%d]: CacheKey equals that of %d", i, j)
		}
		seen[got] = i
	}
	// The security mirror does not matter for suites that do not use it.
	if CacheKey(Options{Suite: "sid"}) != CacheKey(Options{Suite: "sid", SecurityMirror: "http://x/y"}) {
		t.Error("sid: security mirror changed the key")
	}
}

func TestEnsureAccount(t *testing.T) {
	passwd := "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
	tests := []struct {
		name    string
		content string
		want    string
		err     bool
	}{
		{"append", passwd, passwd + passwdLine("/bin/bash") + "\n", false},
		{"unterminated", strings.TrimSuffix(passwd, "\n"), passwd + passwdLine("/bin/bash") + "\n", false},
		{"empty", "", passwdLine("/bin/bash") + "\n", false},
		{"present", passwd + "user:x:1000:1000::/home/user:/bin/sh\n", passwd + "user:x:1000:1000::/home/user:/bin/sh\n", false},
		{"user has other uid", passwd + "user:x:1001:1001::/home/user:/bin/sh\n", "", true},
		{"uid taken", passwd + "debian:x:1000:1000::/home/debian:/bin/sh\n", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ensureAccount("etc/passwd", []byte(tt.content), account.SandboxName, account.SandboxUID, passwdLine("/bin/bash"))
			if tt.err {
				if !errors.Is(err, errdefs.ErrFailedPrecondition) {
					t.Fatalf("err = %v, want ErrFailedPrecondition", err)
				}
				return
			}
			if err != nil || string(got) != tt.want {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
	if n := strings.Count(shadowLine(), ":"); n != 8 {
		t.Errorf("shadow line %q has %d fields, want 9", shadowLine(), n+1)
	}
	if n := strings.Count(gshadowLine(), ":"); n != 3 {
		t.Errorf("gshadow line %q has %d fields, want 4", gshadowLine(), n+1)
	}
	got, err := ensureShadow("etc/shadow", []byte("root:*:1::::::\n"), account.SandboxName, shadowLine())
	if err != nil || string(got) != "root:*:1::::::\n"+shadowLine()+"\n" {
		t.Errorf("ensureShadow = %q, %v", got, err)
	}
	got, err = ensureShadow("etc/shadow", got, account.SandboxName, shadowLine())
	if err != nil || strings.Count(string(got), "user:") != 1 {
		t.Errorf("second ensureShadow = %q, %v", got, err)
	}
}
