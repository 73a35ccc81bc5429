// Package debian builds Debian root filesystems for templates with
// mmdebstrap (the Debian package of that name).
//
// A build is described by Options: a suite (bookworm, trixie, stable, ...),
// a list of packages, a mirror and a variant (the base package set). Every
// field is validated against Debian's own name syntax before anything
// runs, so no value can turn into an mmdebstrap option, an apt pattern or
// an extra sources.list line. mmdebstrap runs as root in --mode=root (a
// plain chroot: the only mode that writes correct ownership straight into
// a directory) in a private mount namespace, with a clean environment and
// a timeout; its output lines go to Options.Progress.
//
// The result is slimmed and made fit for Airlock sandboxes: apt caches and
// package lists removed, documentation excluded (unless KeepDocs), device
// nodes removed from /dev (the runtime mounts its own), the host's
// resolv.conf and hostname replaced, and an unprivileged account `user`
// (uid 1000, gid 1000, home /home/user) added, because sandboxed commands
// run as that user. Every file is owned by a uid and gid in 0..65535. The
// tree is built in a temporary directory beside Options.Target and renamed
// into place only when complete, so Target either holds a finished root
// filesystem or does not exist.
package debian

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Defaults for Options.
const (
	// DefaultMirror is the Debian archive used when Options.Mirror is empty.
	DefaultMirror = "http://deb.debian.org/debian"
	// DefaultSecurityMirror carries the <suite>-security updates.
	DefaultSecurityMirror = "http://deb.debian.org/debian-security"
	// DefaultVariant is the essential package set plus apt: the smallest
	// base in which later build steps can still `apt-get install`.
	DefaultVariant = "apt"
	// DefaultTimeout bounds one mmdebstrap run.
	DefaultTimeout = 30 * time.Minute
)

// Limits on Options.
const (
	// MaxPackages caps the number of packages of one build.
	MaxPackages   = 500
	maxMirrorLen  = 512
	maxSuiteLen   = 32
	maxPackageLen = 128
	maxVersionLen = 128
)

// Variants lists the accepted values of Options.Variant. They are
// mmdebstrap's package sets: essential (Essential:yes packages only, no
// apt), apt (essential plus apt), minbase/required (plus every
// Priority:required package), buildd (plus build-essential),
// important/debootstrap and standard. extract and custom are not offered:
// they do not yield a working system.
var Variants = []string{"essential", "apt", "minbase", "required", "buildd", "important", "debootstrap", "standard"}

// noSecuritySuites are suites without -updates and -security companions.
var noSecuritySuites = []string{"sid", "unstable", "experimental", "rc-buggy"}

var (
	// suiteRe: a release code name or a symbolic suite name (lower case
	// letters and digits, starting with a letter).
	suiteRe = regexp.MustCompile(`^[a-z][a-z0-9]{1,31}$`)
	// packageRe: Debian policy 5.6.1 — at least two characters, lower
	// case letters, digits, '+', '-' and '.', starting with a letter or
	// digit.
	packageRe = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+$`)
	// versionRe: Debian policy 5.6.12 — [epoch:]upstream[-revision].
	versionRe = regexp.MustCompile(`^([0-9]+:)?[0-9][A-Za-z0-9.+~:-]*$`)
	// mirrorRe: characters allowed anywhere in a mirror URL (no
	// whitespace, quotes, brackets outside a host, or query syntax).
	mirrorRe = regexp.MustCompile(`^https?://[A-Za-z0-9._~%+/:\[\]-]+$`)
	// mirrorPathRe: characters allowed in a mirror URL's path.
	mirrorPathRe = regexp.MustCompile(`^[A-Za-z0-9._~/%+-]*$`)
)

// Options describe one Debian root filesystem.
type Options struct {
	// Suite is the release to install: a code name (bookworm, trixie) or a
	// suite name (stable, testing, unstable).
	Suite string
	// Packages are installed on top of the variant. Each is a Debian
	// package name, optionally pinned as name=version. Order and
	// duplicates do not matter.
	Packages []string
	// Mirror is the archive URL (http or https); DefaultMirror if empty.
	Mirror string
	// SecurityMirror carries <suite>-security; DefaultSecurityMirror if
	// empty. It is not used for sid, unstable and experimental, which have
	// no security or updates suites.
	SecurityMirror string
	// Variant is the base package set (one of Variants); DefaultVariant
	// if empty.
	Variant string
	// KeepDocs keeps /usr/share/doc, man pages, info pages and
	// translations, which are excluded by default (copyright files are
	// always kept). The exclusion persists in the image's dpkg
	// configuration, so later apt installs are slim too.
	KeepDocs bool
	// Target is the directory to create (absolute). It must not exist;
	// its parent must. The tree is built beside it and renamed into place.
	Target string
	// Timeout bounds the mmdebstrap run; DefaultTimeout if zero.
	Timeout time.Duration
	// Progress, if set, receives every output line of mmdebstrap and a few
	// lines of Airlock's own, in order, from one goroutine.
	Progress func(line string)
	// Binary is the mmdebstrap executable; looked up in PATH if empty.
	// Tests point it at a fake.
	Binary string
}

// withDefaults returns o with empty fields set to their defaults and the
// package list sorted and deduplicated.
func (o Options) withDefaults() Options {
	if o.Mirror == "" {
		o.Mirror = DefaultMirror
	}
	if o.SecurityMirror == "" {
		o.SecurityMirror = DefaultSecurityMirror
	}
	if o.Variant == "" {
		o.Variant = DefaultVariant
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	pkgs := slices.Clone(o.Packages)
	slices.Sort(pkgs)
	o.Packages = slices.Compact(pkgs)
	return o
}

// Validate checks every field of o (Target only if set) and returns an
// error wrapping errdefs.ErrInvalidArgument that names the first bad one.
func (o Options) Validate() error {
	o = o.withDefaults()
	if err := ValidateSuite(o.Suite); err != nil {
		return err
	}
	if len(o.Packages) > MaxPackages {
		return fmt.Errorf("debian: %d packages, at most %d allowed: %w", len(o.Packages), MaxPackages, errdefs.ErrInvalidArgument)
	}
	for _, p := range o.Packages {
		if err := ValidatePackage(p); err != nil {
			return err
		}
	}
	if err := validateMirror("mirror", o.Mirror); err != nil {
		return err
	}
	if err := validateMirror("security mirror", o.SecurityMirror); err != nil {
		return err
	}
	if !slices.Contains(Variants, o.Variant) {
		return fmt.Errorf("debian: variant %q: must be one of %s: %w", clip(o.Variant), strings.Join(Variants, ", "), errdefs.ErrInvalidArgument)
	}
	if o.Timeout < 0 {
		return fmt.Errorf("debian: negative timeout: %w", errdefs.ErrInvalidArgument)
	}
	if o.Target != "" && (!filepath.IsAbs(o.Target) || filepath.Clean(o.Target) != o.Target || o.Target == "/") {
		return fmt.Errorf("debian: target must be a clean absolute path other than /: %w", errdefs.ErrInvalidArgument)
	}
	return nil
}

// ValidateSuite reports whether s is an acceptable suite name.
func ValidateSuite(s string) error {
	if !suiteRe.MatchString(s) {
		return fmt.Errorf("debian: suite %q: must be a release or suite name such as bookworm or stable (lower case letters and digits): %w", clip(s), errdefs.ErrInvalidArgument)
	}
	return nil
}

// ValidatePackage reports whether p is a Debian package name, optionally
// followed by =version. Architecture qualifiers, apt patterns and
// anything else apt would interpret are rejected.
func ValidatePackage(p string) error {
	name, version, pinned := strings.Cut(p, "=")
	if len(name) > maxPackageLen || !packageRe.MatchString(name) {
		return fmt.Errorf("debian: package %q: not a Debian package name (lower case letters, digits, '+', '-', '.'; at least two characters): %w", clip(p), errdefs.ErrInvalidArgument)
	}
	if pinned && (len(version) > maxVersionLen || !versionRe.MatchString(version)) {
		return fmt.Errorf("debian: package %q: not a Debian version: %w", clip(p), errdefs.ErrInvalidArgument)
	}
	return nil
}

// validateMirror accepts plain http and https archive URLs.
func validateMirror(what, m string) error {
	bad := func(why string) error {
		return fmt.Errorf("debian: %s %q: %s: %w", what, clip(m), why, errdefs.ErrInvalidArgument)
	}
	if len(m) > maxMirrorLen {
		return bad("too long")
	}
	if !mirrorRe.MatchString(m) {
		return bad("must be a plain http or https URL")
	}
	u, err := url.Parse(m)
	if err != nil {
		return bad("not a URL")
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return bad("must be an http or https URL")
	case u.Host == "" || u.Opaque != "":
		return bad("has no host")
	case u.User != nil:
		return bad("must not contain credentials")
	case u.RawQuery != "" || u.Fragment != "" || strings.ContainsAny(m, "?#"):
		return bad("must not have a query or fragment")
	case !hostRe.MatchString(u.Host):
		return bad("bad host")
	case !mirrorPathRe.MatchString(u.Path):
		return bad("bad path")
	}
	return nil
}

// hostRe: a DNS name or IPv4 address with an optional port, or a bracketed
// IPv6 address with an optional port.
var hostRe = regexp.MustCompile(`^([A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?$`)

// CacheKey identifies the root filesystem o describes: the hex SHA-256 of
// the suite, the sorted and deduplicated packages, the mirrors, the
// variant and the docs choice. Options that do not change the result
// (Target, Timeout, Progress, Binary) are not part of it. It does not
// validate o.
func CacheKey(o Options) string {
	o = o.withDefaults()
	h := sha256.New()
	field := func(s string) {
		fmt.Fprintf(h, "%d:%s\n", len(s), s)
	}
	field("airlock-debian-v1")
	field(o.Suite)
	field(fmt.Sprint(len(o.Packages)))
	for _, p := range o.Packages {
		field(p)
	}
	field(o.Mirror)
	if hasSecurity(o.Suite) {
		field(o.SecurityMirror)
	} else {
		field("")
	}
	field(o.Variant)
	field(fmt.Sprint(o.KeepDocs))
	return hex.EncodeToString(h.Sum(nil))
}

// hasSecurity reports whether suite has -updates and -security suites.
func hasSecurity(suite string) bool {
	return !slices.Contains(noSecuritySuites, suite)
}

// slimDpkgOpts keep documentation, man and info pages and translations out
// of the image (copyright files and the locale alias file stay).
var slimDpkgOpts = []string{
	"path-exclude=/usr/share/doc/*",
	"path-include=/usr/share/doc/*/copyright",
	"path-exclude=/usr/share/man/*",
	"path-exclude=/usr/share/info/*",
	"path-exclude=/usr/share/locale/*",
	"path-include=/usr/share/locale/locale.alias",
}

// Args returns the mmdebstrap arguments (without the program name) that
// build o into dir. o must be valid (see Validate). Every positional
// argument follows "--", and every value comes from a validated field, so
// none can be read as an option.
func Args(o Options, dir string) []string {
	o = o.withDefaults()
	args := []string{
		"--mode=root",
		"--format=directory",
		"--variant=" + o.Variant,
		"--verbose",
		// Package description translations are never needed.
		`--aptopt=Acquire::Languages "none"`,
	}
	if len(o.Packages) > 0 {
		args = append(args, "--include="+strings.Join(o.Packages, ","))
	}
	if !o.KeepDocs {
		for _, d := range slimDpkgOpts {
			args = append(args, "--dpkgopt="+d)
		}
	}
	args = append(args, "--", o.Suite, dir)
	args = append(args, "deb "+o.Mirror+" "+o.Suite+" main")
	if hasSecurity(o.Suite) {
		args = append(args,
			"deb "+o.Mirror+" "+o.Suite+"-updates main",
			"deb "+o.SecurityMirror+" "+o.Suite+"-security main")
	}
	return args
}

// clip shortens s for error messages.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
