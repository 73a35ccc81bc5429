package airfile

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

func mustParse(t *testing.T, src string) *File {
	t.Helper()
	f, err := Parse(strings.NewReader(src))
	if err != nil {
		t.Fatalf("Parse: %v\n%s", err, src)
	}
	return f
}

func TestParseFull(t *testing.T) {
	src := "\ufeff# syntax=docker/dockerfile:1\n" +
		"# escape=\\\n" +
		"\n" +
		"DEBIAN bookworm \\\n" +
		"    python3 \\\n" +
		"    # a comment inside the list\n" +
		"\n" +
		"    python3-pandas\r\n" +
		"run apt-get update && \\\n" +
		"    apt-get install -y curl\n" +
		"RUN [\"/usr/bin/python3\", \"-c\", \"print(1)\"]\n" +
		"RUN [ -f /etc/passwd ] && echo yes\n" +
		"COPY --chown=1000:1000 app/ /srv/app/\n" +
		"COPY [\"my file.txt\", \"/srv/my file.txt\"]\n" +
		"ADD --chown=user data.tar /srv/\n" +
		"ENV A=1 B=\"two words\" C='$literal' D=x\\ y\n" +
		"ENV LEGACY some value here\n" +
		"WORKDIR /srv/app\n" +
		"USER user:user\n" +
		"\tUSER\t1000\n"
	f := mustParse(t, src)
	want := []Step{
		{Kind: KindDebian, Line: 4, Args: []string{"bookworm", "python3", "python3-pandas"},
			Base: &Base{Kind: BaseDebian, Suite: "bookworm", Packages: []string{"python3", "python3-pandas"}}},
		{Kind: KindRun, Line: 9, Args: []string{"apt-get update &&     apt-get install -y curl"}},
		{Kind: KindRun, Line: 11, Args: []string{"/usr/bin/python3", "-c", "print(1)"}, Exec: true},
		{Kind: KindRun, Line: 12, Args: []string{"[ -f /etc/passwd ] && echo yes"}},
		{Kind: KindCopy, Line: 13, Args: []string{"app/", "/srv/app/"}, Chown: "1000:1000"},
		{Kind: KindCopy, Line: 14, Args: []string{"my file.txt", "/srv/my file.txt"}},
		{Kind: KindAdd, Line: 15, Args: []string{"data.tar", "/srv/"}, Chown: "user"},
		{Kind: KindEnv, Line: 16, Args: []string{"A=1", `B="two words"`, "C='$literal'", `D=x\ y`},
			Env: []EnvVar{{"A", "1"}, {"B", `"two words"`}, {"C", "'$literal'"}, {"D", `x\ y`}}},
		{Kind: KindEnv, Line: 17, Args: []string{"LEGACY=some value here"},
			Env: []EnvVar{{"LEGACY", "some value here"}}, legacyEnv: true},
		{Kind: KindWorkdir, Line: 18, Args: []string{"/srv/app"}},
		{Kind: KindUser, Line: 19, Args: []string{"user:user"}},
		{Kind: KindUser, Line: 20, Args: []string{"1000"}},
	}
	if len(f.Steps) != len(want) {
		t.Fatalf("got %d steps, want %d:\n%s", len(f.Steps), len(want), f)
	}
	for i := range want {
		if !reflect.DeepEqual(f.Steps[i], want[i]) {
			t.Errorf("step %d:\n got %#v\nwant %#v", i, f.Steps[i], want[i])
		}
	}
	if b := f.Base(); b.Kind != BaseDebian || b.Suite != "bookworm" {
		t.Errorf("Base = %+v", b)
	}
	if got := f.Steps[1].Argv(); !reflect.DeepEqual(got, []string{"/bin/sh", "-c", "apt-get update &&     apt-get install -y curl"}) {
		t.Errorf("shell Argv = %q", got)
	}
	if got := f.Steps[2].Argv(); !reflect.DeepEqual(got, []string{"/usr/bin/python3", "-c", "print(1)"}) {
		t.Errorf("exec Argv = %q", got)
	}
	if got := f.Steps[5].Sources(); !reflect.DeepEqual(got, []string{"my file.txt"}) || f.Steps[5].Dest() != "/srv/my file.txt" {
		t.Errorf("Sources/Dest = %q %q", got, f.Steps[5].Dest())
	}

	// The canonical rendering parses back to the same steps.
	again := mustParse(t, f.String())
	for i := range f.Steps {
		a, b := f.Steps[i], again.Steps[i]
		a.Line, b.Line = 0, 0
		if !reflect.DeepEqual(a, b) {
			t.Errorf("round trip of step %d:\n got %#v\nwant %#v", i, b, a)
		}
	}
}

func TestParseFrom(t *testing.T) {
	tests := []struct {
		line string
		want Base
	}{
		{"FROM template:host", Base{Kind: BaseTemplate, Template: "host"}},
		{"from template:python-data", Base{Kind: BaseTemplate, Template: "python-data"}},
		{"FROM python", Base{Kind: BaseImage, Image: "python"}},
		{"FROM python:3.12-slim", Base{Kind: BaseImage, Image: "python:3.12-slim"}},
		{"FROM docker.io/library/debian:bookworm", Base{Kind: BaseImage, Image: "docker.io/library/debian:bookworm"}},
		{"FROM localhost:5000/team/tool:v1", Base{Kind: BaseImage, Image: "localhost:5000/team/tool:v1"}},
		{"FROM ghcr.io/org/app@sha256:" + strings.Repeat("ab", 32), Base{Kind: BaseImage, Image: "ghcr.io/org/app@sha256:" + strings.Repeat("ab", 32)}},
		{"FROM registry.example.com:443/a/b_c/d--e:tag@sha256:" + strings.Repeat("0", 64), Base{Kind: BaseImage, Image: "registry.example.com:443/a/b_c/d--e:tag@sha256:" + strings.Repeat("0", 64)}},
		{"FROM [::1]:5000/x", Base{Kind: BaseImage, Image: "[::1]:5000/x"}},
		{"DEBIAN trixie", Base{Kind: BaseDebian, Suite: "trixie"}},
	}
	for _, tt := range tests {
		f := mustParse(t, tt.line+"\n")
		if got := f.Base(); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: Base = %#v, want %#v", tt.line, got, tt.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		src  string
		line int
		msg  string
	}{
		{"empty", "", 0, "no FROM or DEBIAN"},
		{"only comments", "# hi\n\n", 0, "no FROM or DEBIAN"},
		{"first not from", "RUN true\n", 1, "first instruction must be FROM or DEBIAN"},
		{"two from", "FROM template:host\nFROM python\n", 2, "only one FROM"},
		{"debian after from", "FROM template:host\nDEBIAN bookworm\n", 2, "only one DEBIAN"},
		{"multi-stage", "FROM python AS build\n", 1, "multi-stage"},
		{"from platform", "FROM --platform=linux/amd64 python\n", 1, "not supported"},
		{"from scratch", "FROM scratch\n", 1, "scratch"},
		{"from upper repo", "FROM Python\n", 1, "image reference"},
		{"from bad tag", "FROM python:3.12!\n", 1, "bad tag"},
		{"from bad digest", "FROM python@sha256:abc\n", 1, "bad digest"},
		{"from two args", "FROM a b\n", 1, "takes one"},
		{"from bad template", "FROM template:Bad_Name\n", 1, "template name"},
		{"from empty template", "FROM template:\n", 1, "template name"},
		{"from no args", "FROM\n", 1, "needs arguments"},
		{"debian bad suite", "DEBIAN --variant=extract\n", 1, "suite"},
		{"debian bad package", "DEBIAN bookworm python3 ?priority(required)\n", 1, "package"},
		{"debian option package", "DEBIAN bookworm \\\n  --hook-dir=/\n", 1, "package"},
		{"unknown", "FROM template:host\nFROBNICATE x\n", 2, "unknown instruction"},
		{"volume", "FROM template:host\n\nVOLUME /data\n", 3, "VOLUME"},
		{"shell", "FROM template:host\nSHELL [\"/bin/bash\", \"-c\"]\n", 2, "SHELL"},
		{"ignored before base", "EXPOSE 80\nFROM template:host\n", 1, "first instruction must be FROM"},
		{"arg", "FROM template:host\nARG X=1\n", 2, "ARG"},
		{"bad keyword", "FROM template:host\nRUN-X y\n", 2, "not an instruction"},
		{"run empty", "FROM template:host\nRUN\n", 2, "needs arguments"},
		{"run blank continuation", "FROM template:host\nRUN \\\n\n", 2, "needs arguments"},
		{"run mount", "FROM template:host\nRUN --mount=type=cache,target=/x make\n", 2, "not supported"},
		{"run empty exec", "FROM template:host\nRUN []\n", 2, "needs a program"},
		{"run nul exec", "FROM template:host\nRUN [\"a\\u0000b\"]\n", 2, "NUL"},
		{"copy one arg", "FROM template:host\nCOPY a\n", 2, "source and a destination"},
		{"copy escape", "FROM template:host\nCOPY ../secret /x\n", 2, "outside the build context"},
		{"copy escape deep", "FROM template:host\nCOPY a/../../b /x\n", 2, "outside the build context"},
		{"copy var source", "FROM template:host\nCOPY $HOME/x /x\n", 2, "variables"},
		{"copy multi no slash", "FROM template:host\nCOPY a b /dest\n", 2, "must end with /"},
		{"copy glob no slash", "FROM template:host\nCOPY *.py /dest\n", 2, "must end with /"},
		{"copy bad glob", "FROM template:host\nCOPY [a /dest/\n", 2, "wildcard"},
		{"copy from", "FROM template:host\nCOPY --from=build /a /b\n", 2, "--from is not supported"},
		{"copy chmod", "FROM template:host\nCOPY --chmod=755 a /b\n", 2, "--chmod is not supported"},
		{"copy chown big", "FROM template:host\nCOPY --chown=70000 a /b\n", 2, "65535"},
		{"copy chown bad", "FROM template:host\nCOPY --chown=a;b a /b\n", 2, "user[:group]"},
		{"copy chown twice", "FROM template:host\nCOPY --chown=1 --chown=2 a /b\n", 2, "twice"},
		{"copy bad dest", "FROM template:host\nCOPY a \"${X\n", 2, "destination"},
		{"add url", "FROM template:host\nADD https://example.com/x.tar.gz /x/\n", 2, "URLs are not supported"},
		{"add git", "FROM template:host\nADD git@github.com:a/b.git /x/\n", 2, "URLs are not supported"},
		{"env no value", "FROM template:host\nENV A\n", 2, "needs a value"},
		{"env bad key", "FROM template:host\nENV 1A=x\n", 2, "bad variable name"},
		{"env bad pair", "FROM template:host\nENV A=1 B\n", 2, "not KEY=VALUE"},
		{"env open quote", "FROM template:host\nENV A=\"x\n", 2, "unterminated"},
		{"env bad subst", "FROM template:host\nENV A=${B:?x}\n", 2, "bad substitution"},
		{"env unclosed brace", "FROM template:host\nENV A=${B\n", 2, "missing }"},
		{"workdir bad", "FROM template:host\nWORKDIR ${\n", 2, "WORKDIR"},
		{"user bad", "FROM template:host\nUSER root;rm\n", 2, "USER"},
		{"user two", "FROM template:host\nUSER a b\n", 2, "USER"},
		{"control char", "FROM template:host\nRUN echo \x01\n", 2, "control character"},
		{"invalid utf8", "FROM template:host\nRUN echo \xff\n", 2, "UTF-8"},
		{"escape directive", "# escape=`\nFROM template:host\n", 1, "escape"},
		{"long line", "FROM template:host\nRUN " + strings.Repeat("x", MaxLineBytes) + "\n", 2, "longer than"},
		{"long instruction", "FROM template:host\nRUN " + strings.Repeat(strings.Repeat("x", 1000)+" \\\n", 70) + "\n", 2, "instruction longer than"},
		{"too many steps", "FROM template:host\n" + strings.Repeat("RUN true\n", MaxSteps), MaxSteps + 1, "more than"},
		{"too big", "FROM template:host\n" + strings.Repeat("# padding padding\n", MaxFileBytes/18+1), 0, "larger than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse(strings.NewReader(tt.src))
			if err == nil {
				t.Fatalf("Parse succeeded: %s", f)
			}
			var pe *Error
			if !errors.As(err, &pe) || !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("err = %v (%T), want *Error wrapping ErrInvalidArgument", err, err)
			}
			if pe.Line != tt.line || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("err = %q (line %d), want line %d containing %q", err, pe.Line, tt.line, tt.msg)
			}
		})
	}
}

func TestParseLimitsAreInclusive(t *testing.T) {
	src := "FROM template:host\n" + strings.Repeat("RUN true\n", MaxSteps-1)
	if f := mustParse(t, src); len(f.Steps) != MaxSteps {
		t.Fatalf("got %d steps", len(f.Steps))
	}
	line := "RUN " + strings.Repeat("x", MaxLineBytes-4)
	mustParse(t, "FROM template:host\n"+line+"\n")
}

func TestExpand(t *testing.T) {
	env := map[string]string{"HOME": "/home/user", "EMPTY": "", "PATH": "/usr/bin:/bin"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	tests := []struct {
		in, want string
		bad      bool
	}{
		{in: "plain", want: "plain"},
		{in: "$HOME/x", want: "/home/user/x"},
		{in: "${HOME}x", want: "/home/userx"},
		{in: "/opt/bin:$PATH", want: "/opt/bin:/usr/bin:/bin"},
		{in: "$UNSET-x", want: "-x"},
		{in: "${UNSET:-def}", want: "def"},
		{in: "${EMPTY:-def}", want: "def"},
		{in: "${HOME:-def}", want: "/home/user"},
		{in: "${HOME:+alt}", want: "alt"},
		{in: "${EMPTY:+alt}", want: ""},
		{in: "${UNSET:-${HOME}/d}", want: "/home/user/d"},
		{in: `"a b $HOME"`, want: "a b /home/user"},
		{in: `'a b $HOME'`, want: "a b $HOME"},
		{in: `"q\"q\\q\$q\nq"`, want: `q"q\q$q\nq`},
		{in: `a\ b\$HOME`, want: "a b$HOME"},
		{in: `trailing\`, want: `trailing\`},
		{in: "$", want: "$"},
		{in: "a$1", want: "a$1"},
		{in: "}{", want: "}{"},
		{in: "${}", bad: true},
		{in: "${HOME", bad: true},
		{in: "${HOME:=x}", bad: true},
		{in: "${HOME/a/b}", bad: true},
		{in: `"open`, bad: true},
		{in: `'open`, bad: true},
		{in: strings.Repeat("${A:-", 20) + strings.Repeat("}", 20), bad: true},
	}
	for _, tt := range tests {
		got, err := Expand(tt.in, lookup)
		if tt.bad {
			if err == nil {
				t.Errorf("Expand(%q) = %q, want an error", tt.in, got)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("Expand(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	big := strings.Repeat("x", 1<<19)
	if _, err := Expand("$B$B$B", func(string) (string, bool) { return big, true }); err == nil {
		t.Error("Expand did not cap its output")
	}
}

func TestValidateImageRef(t *testing.T) {
	good := []string{"a", "python", "library/python:3", "a.b/c", "a:1/b", "localhost/x", "x__y", "x-y--z", "a.b-c_d",
		"UPPER.example.com/x", "x@sha512:" + strings.Repeat("f", 128)}
	bad := []string{"", "A", "a/B", "a:", "a@", ":tag", "/a", "a/", "a//b", "-a", "a_", "a:-tag", "a:" + strings.Repeat("t", 129),
		"a@sha256:xyz", "a b", "http://a/b", strings.Repeat("a", 256), "a..b", "host:port:x/y"}
	for _, r := range good {
		if err := ValidateImageRef(r); err != nil {
			t.Errorf("ValidateImageRef(%q) = %v", r, err)
		}
	}
	for _, r := range bad {
		if err := ValidateImageRef(r); err == nil {
			t.Errorf("ValidateImageRef(%q) = nil, want an error", r)
		}
	}
}

// TestParseIgnored: the Dockerfile instructions that mean nothing for a
// template are accepted, listed with their lines, and never become steps
// (the step cache keys do not change).
func TestParseIgnored(t *testing.T) {
	src := "FROM template:host\n" +
		"LABEL org.opencontainers.image.title=\"app\" \\\n  version=1\n" +
		"EXPOSE 8080/tcp\n" +
		"RUN true\n" +
		"maintainer someone@example.com\n" +
		"HEALTHCHECK --interval=5s CMD curl -f http://localhost/ || exit 1\n" +
		"STOPSIGNAL SIGTERM\n" +
		"ENTRYPOINT [\"/app\"]\n" +
		"CMD [\"--serve\"]\n"
	f := mustParse(t, src)
	if len(f.Steps) != 2 || f.Steps[1].Kind != KindRun {
		t.Fatalf("steps = %+v, want FROM and RUN", f.Steps)
	}
	var got []string
	for _, ig := range f.Ignored {
		got = append(got, fmt.Sprintf("%d %s", ig.Line, ig.Instruction))
		if ig.Reason == "" || !strings.HasPrefix(strings.ToUpper(ig.Text), ig.Instruction) {
			t.Errorf("ignored %+v: no reason or wrong text", ig)
		}
	}
	want := []string{"2 LABEL", "4 EXPOSE", "6 MAINTAINER", "7 HEALTHCHECK", "8 STOPSIGNAL", "9 ENTRYPOINT", "10 CMD"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ignored = %v, want %v", got, want)
	}
	if s := f.Ignored[1].String(); s != "airfile line 4: EXPOSE is ignored: sandboxes have no network ports to publish" {
		t.Errorf("String() = %q", s)
	}
	plain := mustParse(t, "FROM template:host\nRUN true\n")
	ctx := context.Background()
	k1, err := f.CacheKeys(ctx, "", "base")
	if err != nil {
		t.Fatal(err)
	}
	k2, err := plain.CacheKeys(ctx, "", "base")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(k1, k2) {
		t.Errorf("ignored instructions changed the cache keys: %v vs %v", k1, k2)
	}
	long := "FROM template:host\nLABEL a=\"" + strings.Repeat("é", 300) + "\"\n"
	if ig := mustParse(t, long).Ignored[0]; len(ig.Text) > 203 || !utf8.ValidString(ig.Text) {
		t.Errorf("long ignored text: %d bytes, valid %v", len(ig.Text), utf8.ValidString(ig.Text))
	}
}
