package airfile

import (
	"regexp"
	"strings"
)

// The grammar of image references, from the distribution project's
// reference package (github.com/distribution/reference):
//
//	reference  := name [ ":" tag ] [ "@" digest ]
//	name       := [domain '/'] remote-name
//	domain     := host [':' port]
//	remote     := path-component ['/' path-component]*
//	path-comp  := [a-z0-9]+ (separator [a-z0-9]+)*, separator [_.]|__|-+
//	tag        := [\w][\w.-]{0,127}
//	digest     := algorithm ":" hex (at least 32 hex digits)
var (
	domainRe = regexp.MustCompile(`^(localhost|([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(\.([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*|\[[a-fA-F0-9:]+\])(:[0-9]+)?$`)
	pathRe   = regexp.MustCompile(`^[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*$`)
	tagRe    = regexp.MustCompile(`^[\w][\w.-]{0,127}$`)
	digestRe = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]*([-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}$`)
)

// maxNameLen is the longest repository name (domain and path).
const maxNameLen = 255

// ValidateImageRef checks the syntax of an OCI image reference such as
// python:3.12-slim, ghcr.io/org/app@sha256:... or
// localhost:5000/team/tool:v1. It does not resolve or contact anything.
func ValidateImageRef(ref string) error {
	bad := func(why string) error {
		return problemf("image reference %q: %s", clip(ref), why)
	}
	name, digest, hasDigest := strings.Cut(ref, "@")
	if hasDigest && !digestRe.MatchString(digest) {
		return bad("bad digest")
	}
	// A tag follows the last ':' after the last '/' (a ':' before it
	// belongs to a registry port).
	if i := strings.LastIndexByte(name, ':'); i > strings.LastIndexByte(name, '/') {
		if !tagRe.MatchString(name[i+1:]) {
			return bad("bad tag")
		}
		name = name[:i]
	}
	if name == "" || len(name) > maxNameLen {
		return bad("bad repository name")
	}
	parts := strings.Split(name, "/")
	if len(parts) > 1 && (strings.ContainsAny(parts[0], ".:") || parts[0] == "localhost" || parts[0] != strings.ToLower(parts[0])) {
		if !domainRe.MatchString(parts[0]) {
			return bad("bad registry host")
		}
		parts = parts[1:]
	}
	for _, p := range parts {
		if !pathRe.MatchString(p) {
			return bad("repository names are lower case letters, digits and separators")
		}
	}
	return nil
}
