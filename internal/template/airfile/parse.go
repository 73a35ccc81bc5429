package airfile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/internal/template/debian"
)

var (
	// directiveRe matches a parser directive comment (`# escape=\`).
	directiveRe = regexp.MustCompile(`^#\s*([A-Za-z][A-Za-z0-9_-]*)\s*=\s*(.*?)\s*$`)
	// keywordRe is the syntax of an instruction keyword.
	keywordRe = regexp.MustCompile(`^[A-Za-z]+$`)
	// envKeyRe is the syntax of an environment variable name.
	envKeyRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	// templateNameRe mirrors template.NamePattern (not imported: the
	// template package may come to depend on this one).
	templateNameRe = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)
	// idRe is one half of a USER or --chown value: a numeric id or a
	// user/group name (Debian's syntax, as adduser accepts it).
	idRe = regexp.MustCompile(`^([0-9]{1,5}|[a-z_][a-z0-9_.-]{0,31})$`)
)

// unsupported lists Dockerfile instructions an Airfile rejects, with why:
// each would change what the build produces, so ignoring it would build
// something other than what the file says.
var unsupported = map[string]string{
	"ARG":     "build arguments are not supported; use ENV",
	"VOLUME":  "volumes are not supported (later steps' writes to a Docker volume are discarded; here they would be kept); remove the line",
	"SHELL":   "the shell is always /bin/sh -c",
	"ONBUILD": "ONBUILD is not supported",
}

// ignored lists Dockerfile instructions that mean nothing for a template,
// with why: Parse accepts them without a step and reports them in
// File.Ignored, so that a Dockerfile builds without edits.
var ignored = map[string]string{
	"EXPOSE":      "sandboxes have no network ports to publish",
	"LABEL":       "templates keep no labels",
	"MAINTAINER":  "templates keep no labels",
	"CMD":         "sandboxes start no default command; run it with exec",
	"ENTRYPOINT":  "sandboxes start no default command; run it with exec",
	"HEALTHCHECK": "sandboxes have no main process to check",
	"STOPSIGNAL":  "sandboxes have no main process to signal",
}

// Parse reads an Airfile from r and returns its steps, or an *Error
// (wrapping errdefs.ErrInvalidArgument) naming the first bad line. It
// reads at most MaxFileBytes+1 bytes.
func Parse(r io.Reader) (*File, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxFileBytes+1))
	if err != nil {
		return nil, &Error{Msg: "reading: " + err.Error()}
	}
	if len(data) > MaxFileBytes {
		return nil, errorf(0, "larger than %d bytes", MaxFileBytes)
	}
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	lines := strings.Split(string(data), "\n")
	for i, l := range lines {
		l = strings.TrimSuffix(l, "\r")
		lines[i] = l
		if err := checkText(i+1, l); err != nil {
			return nil, err
		}
	}
	p := parser{lines: lines}
	return p.parse()
}

// checkText rejects invalid UTF-8, control characters other than tab,
// and overlong lines.
func checkText(line int, l string) error {
	if len(l) > MaxLineBytes {
		return errorf(line, "longer than %d bytes", MaxLineBytes)
	}
	if !utf8.ValidString(l) {
		return errorf(line, "not valid UTF-8")
	}
	for _, r := range l {
		if (r < 0x20 && r != '\t') || r == 0x7f {
			return errorf(line, "control character %U", r)
		}
	}
	return nil
}

// parser holds the state of one Parse.
type parser struct {
	lines   []string
	next    int // index of the next unread line
	steps   []Step
	ignored []Ignored
}

func (p *parser) parse() (*File, error) {
	directives := true
	for p.next < len(p.lines) {
		lineNo := p.next + 1
		text := strings.TrimLeft(p.lines[p.next], " \t")
		if text == "" {
			directives = false
			p.next++
			continue
		}
		if text[0] == '#' {
			if directives {
				if err := directive(lineNo, text); err != nil {
					return nil, err
				}
			}
			p.next++
			continue
		}
		directives = false
		logical, err := p.logicalLine()
		if err != nil {
			return nil, err
		}
		if len(p.steps) == MaxSteps {
			return nil, errorf(lineNo, "more than %d steps", MaxSteps)
		}
		if ig, ok := p.ignore(lineNo, logical); ok {
			if len(p.ignored) == MaxSteps {
				return nil, errorf(lineNo, "more than %d ignored instructions", MaxSteps)
			}
			p.ignored = append(p.ignored, ig)
			continue
		}
		step, err := p.instruction(lineNo, logical)
		if err != nil {
			return nil, err
		}
		p.steps = append(p.steps, step)
	}
	if len(p.steps) == 0 {
		return nil, errorf(0, "no FROM or DEBIAN instruction")
	}
	return &File{Steps: p.steps, Ignored: p.ignored}, nil
}

// ignore reports whether the logical line text is an instruction of
// ignored that comes after the base instruction (before it, the usual
// "first instruction" error applies).
func (p *parser) ignore(line int, text string) (Ignored, bool) {
	word, _ := cutWord(text)
	kind := strings.ToUpper(word)
	why, ok := ignored[kind]
	if !ok || len(p.steps) == 0 {
		return Ignored{}, false
	}
	return Ignored{Line: line, Instruction: kind, Text: clipText(text, 200), Reason: why}, true
}

// clipText shortens s to at most n bytes, on a rune boundary.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

// directive checks a comment before the first instruction: an escape
// directive other than the default backslash changes the syntax and is
// rejected; other directives (syntax, check) are ignored.
func directive(line int, text string) error {
	m := directiveRe.FindStringSubmatch(text)
	if m != nil && strings.EqualFold(m[1], "escape") && m[2] != `\` {
		return errorf(line, "only the default escape character \\ is supported")
	}
	return nil
}

// logicalLine joins the instruction starting at p.next with its
// continuation lines: a line ending in a backslash (and optional blanks)
// continues on the next line that is neither empty nor a comment. The
// backslash and the line break are removed.
func (p *parser) logicalLine() (string, error) {
	start := p.next + 1
	var b strings.Builder
	cur := strings.TrimLeft(p.lines[p.next], " \t")
	for {
		p.next++
		s := strings.TrimRight(cur, " \t")
		cont := strings.HasSuffix(s, `\`)
		if cont {
			s = s[:len(s)-1]
		}
		b.WriteString(s)
		if b.Len() > MaxLineBytes {
			return "", errorf(start, "instruction longer than %d bytes", MaxLineBytes)
		}
		if !cont {
			break
		}
		for p.next < len(p.lines) {
			t := strings.TrimLeft(p.lines[p.next], " \t")
			if t != "" && t[0] != '#' {
				break
			}
			p.next++
		}
		if p.next == len(p.lines) {
			break
		}
		cur = p.lines[p.next]
	}
	return strings.TrimSpace(b.String()), nil
}

// instruction parses one logical line.
func (p *parser) instruction(line int, text string) (Step, error) {
	word, rest := cutWord(text)
	if !keywordRe.MatchString(word) {
		return Step{}, errorf(line, "%q is not an instruction", clip(word))
	}
	kind := Kind(strings.ToUpper(word))
	first := len(p.steps) == 0
	switch {
	case first && kind != KindFrom && kind != KindDebian:
		return Step{}, errorf(line, "the first instruction must be FROM or DEBIAN, not %s", clip(string(kind)))
	case !first && (kind == KindFrom || kind == KindDebian):
		return Step{}, errorf(line, "only one %s is allowed (no multi-stage builds)", kind)
	}
	if rest == "" {
		return Step{}, errorf(line, "%s needs arguments", kind)
	}
	step := Step{Kind: kind, Line: line}
	var err error
	switch kind {
	case KindFrom:
		err = parseFrom(&step, rest)
	case KindDebian:
		err = parseDebian(&step, rest)
	case KindRun:
		err = parseRun(&step, rest)
	case KindCopy, KindAdd:
		err = parseCopy(&step, rest)
	case KindEnv:
		err = parseEnv(&step, rest)
	case KindWorkdir:
		err = parseWorkdir(&step, rest)
	case KindUser:
		err = parseUser(&step, rest)
	default:
		if why, ok := unsupported[string(kind)]; ok {
			return Step{}, errorf(line, "%s: %s", kind, why)
		}
		return Step{}, errorf(line, "unknown instruction %s", clip(string(kind)))
	}
	if err != nil {
		return Step{}, errorf(line, "%s: %s", kind, err.Error())
	}
	return step, nil
}

// cutWord splits s at its first blank into a word and the rest, both
// trimmed.
func cutWord(s string) (word, rest string) {
	i := strings.IndexAny(s, " \t")
	if i < 0 {
		return s, ""
	}
	return s[:i], strings.TrimSpace(s[i+1:])
}

// problem is a parse error without a line; instruction adds it.
type problem string

func (p problem) Error() string { return string(p) }

func problemf(format string, args ...any) error {
	return problem(fmt.Sprintf(format, args...))
}

func parseFrom(s *Step, rest string) error {
	f := strings.Fields(rest)
	switch {
	case strings.HasPrefix(f[0], "--"):
		return problemf("options such as %q are not supported", clip(f[0]))
	case len(f) == 3 && strings.EqualFold(f[1], "AS"):
		return problemf("multi-stage builds (FROM ... AS) are not supported")
	case len(f) != 1:
		return problemf("takes one image or template:NAME")
	}
	ref := f[0]
	s.Args = []string{ref}
	if name, ok := strings.CutPrefix(ref, "template:"); ok {
		if !templateNameRe.MatchString(name) {
			return problemf("template name %q: must match %s", clip(name), templateNameRe)
		}
		s.Base = &Base{Kind: BaseTemplate, Template: name}
		return nil
	}
	if ref == "scratch" {
		return problemf("FROM scratch is not supported; use DEBIAN or an image")
	}
	if err := ValidateImageRef(ref); err != nil {
		return err
	}
	s.Base = &Base{Kind: BaseImage, Image: ref}
	return nil
}

func parseDebian(s *Step, rest string) error {
	f := strings.Fields(rest)
	if err := debian.ValidateSuite(f[0]); err != nil {
		return problemf("suite %q: must be a release or suite name such as bookworm", clip(f[0]))
	}
	if len(f)-1 > debian.MaxPackages {
		return problemf("more than %d packages", debian.MaxPackages)
	}
	for _, pkg := range f[1:] {
		if err := debian.ValidatePackage(pkg); err != nil {
			return problemf("package %q: not a Debian package name", clip(pkg))
		}
	}
	s.Args = f
	s.Base = &Base{Kind: BaseDebian, Suite: f[0], Packages: append([]string(nil), f[1:]...)}
	return nil
}

// jsonArgs parses rest as a JSON array of strings; ok is false when rest
// is not one (the instruction is then in shell form, as in Dockerfiles).
func jsonArgs(rest string) ([]string, bool) {
	if !strings.HasPrefix(rest, "[") || !strings.HasSuffix(rest, "]") {
		return nil, false
	}
	var args []string
	if err := json.Unmarshal([]byte(rest), &args); err != nil {
		return nil, false
	}
	return args, true
}

func parseRun(s *Step, rest string) error {
	if strings.HasPrefix(rest, "--") {
		return problemf("options such as %q are not supported", clip(strings.Fields(rest)[0]))
	}
	if argv, ok := jsonArgs(rest); ok {
		if len(argv) == 0 || argv[0] == "" {
			return problemf("exec form needs a program")
		}
		for _, a := range argv {
			if strings.IndexByte(a, 0) >= 0 {
				return problemf("argument contains a NUL byte")
			}
		}
		s.Args, s.Exec = argv, true
		return nil
	}
	s.Args = []string{rest}
	return nil
}

func parseCopy(s *Step, rest string) error {
	for strings.HasPrefix(rest, "--") {
		var flag string
		flag, rest = cutWord(rest)
		name, value, _ := strings.Cut(flag[2:], "=")
		switch name {
		case "chown":
			if s.Chown != "" {
				return problemf("--chown given twice")
			}
			if err := validateOwner(value); err != nil {
				return problemf("--chown=%s: %s", clip(value), err)
			}
			s.Chown = value
		default:
			return problemf("option --%s is not supported", clip(name))
		}
	}
	args, ok := jsonArgs(rest)
	if !ok {
		args = strings.Fields(rest)
	}
	if len(args) < 2 {
		return problemf("needs at least one source and a destination")
	}
	srcs, dest := args[:len(args)-1], args[len(args)-1]
	globs := false
	for _, src := range srcs {
		if err := validateSource(s.Kind, src); err != nil {
			return err
		}
		globs = globs || hasGlob(src)
	}
	if dest == "" || strings.IndexByte(dest, 0) >= 0 {
		return problemf("bad destination")
	}
	if (len(srcs) > 1 || globs) && !strings.HasSuffix(dest, "/") {
		return problemf("with several sources or a wildcard the destination must end with /")
	}
	if _, err := Expand(dest, nil); err != nil {
		return problemf("destination %q: %s", clip(dest), err)
	}
	s.Args = args
	return nil
}

// validateSource checks one COPY/ADD source: a path inside the build
// context, possibly with wildcards, without variables, and for ADD not a
// URL.
func validateSource(kind Kind, src string) error {
	switch {
	case src == "" || strings.IndexByte(src, 0) >= 0:
		return problemf("empty or bad source")
	case strings.Contains(src, "://") || strings.HasPrefix(src, "git@"):
		if kind == KindAdd {
			return problemf("source %q: only local files can be added; URLs are not supported", clip(src))
		}
		return problemf("source %q: not a local path", clip(src))
	case strings.ContainsRune(src, '$'):
		return problemf("source %q: variables are not supported in sources", clip(src))
	case strings.ContainsRune(src, '\\'):
		return problemf("source %q: backslashes are not supported in sources", clip(src))
	}
	if c := path.Clean(src); c == ".." || strings.HasPrefix(c, "../") {
		return problemf("source %q is outside the build context", clip(src))
	}
	if hasGlob(src) {
		if _, err := path.Match(src, ""); err != nil {
			return problemf("source %q: bad wildcard pattern", clip(src))
		}
	}
	return nil
}

// hasGlob reports whether a source has wildcard characters.
func hasGlob(src string) bool { return strings.ContainsAny(src, "*?[") }

// validateOwner checks user[:group], each a name or a numeric id up to
// 65535.
func validateOwner(v string) error {
	user, group, hasGroup := strings.Cut(v, ":")
	parts := []string{user}
	if hasGroup {
		parts = append(parts, group)
	}
	for _, part := range parts {
		if !idRe.MatchString(part) {
			return problem("must be user[:group] with names or numeric ids")
		}
		if n, err := strconv.Atoi(part); err == nil && n > 65535 {
			return problem("ids must be at most 65535")
		}
	}
	return nil
}

func parseEnv(s *Step, rest string) error {
	words, err := splitWords(rest)
	if err != nil {
		return err
	}
	if !strings.Contains(words[0], "=") {
		// Legacy form: ENV key value-to-end-of-line.
		key := words[0]
		if !envKeyRe.MatchString(key) {
			return problemf("bad variable name %q", clip(key))
		}
		value := strings.TrimSpace(rest[len(key):])
		if value == "" {
			return problemf("%s needs a value (ENV KEY=VALUE or ENV KEY VALUE)", key)
		}
		if strings.HasSuffix(value, "\\") {
			// Written back, it would read as a line continuation.
			return problemf("%s: a value in the ENV KEY VALUE form cannot end with a backslash; use ENV KEY=\"VALUE\"", key)
		}
		if _, err := Expand(value, nil); err != nil {
			return problemf("%s: %s", key, err)
		}
		s.Env = []EnvVar{{Key: key, Value: value}}
		s.Args = []string{key + "=" + value}
		s.legacyEnv = true
		return nil
	}
	for _, w := range words {
		key, value, ok := strings.Cut(w, "=")
		if !ok {
			return problemf("%q is not KEY=VALUE", clip(w))
		}
		if !envKeyRe.MatchString(key) {
			return problemf("bad variable name %q", clip(key))
		}
		if _, err := Expand(value, nil); err != nil {
			return problemf("%s: %s", key, err)
		}
		s.Env = append(s.Env, EnvVar{Key: key, Value: value})
		s.Args = append(s.Args, w)
	}
	return nil
}

func parseWorkdir(s *Step, rest string) error {
	if _, err := Expand(rest, nil); err != nil {
		return problemf("%q: %s", clip(rest), err)
	}
	s.Args = []string{rest}
	return nil
}

func parseUser(s *Step, rest string) error {
	if err := validateOwner(rest); err != nil {
		return problemf("%q: %s", clip(rest), err)
	}
	s.Args = []string{rest}
	return nil
}
