// Package airfile parses Airfiles, the build recipes of Airlock templates.
//
// An Airfile is a subset of the Dockerfile format: one base instruction
// (FROM or DEBIAN) followed by RUN, COPY, ADD, ENV, WORKDIR and USER steps,
// with # comments, `\` line continuations and the JSON ("exec") form of RUN
// and COPY/ADD. The base is one of
//
//	FROM template:<name>         an existing Airlock template (template:host)
//	FROM <image reference>       an OCI image (docker.io/library/python:3.12)
//	DEBIAN <suite> [package ...] a Debian root filesystem that mmdebstrap
//	                             builds from that suite with those packages
//
// (An image on Docker Hub that is itself called "template" must be
// written in full: docker.io/library/template:TAG.)
//
// Parse turns a file into typed Steps, each with its line number. The
// Dockerfile instructions that mean nothing for a template (EXPOSE, LABEL,
// MAINTAINER, CMD, ENTRYPOINT, HEALTHCHECK, STOPSIGNAL) are accepted and
// listed in File.Ignored. Everything else is rejected with an *Error
// naming the line: the Dockerfile instructions that would change what is
// built (ARG, VOLUME, SHELL, ONBUILD, multi-stage builds, RUN --mount,
// ...), ADD from URLs, sources outside the build context, files,
// instructions and step lists above the caps.
//
// (*File).CacheKeys gives every step a key that changes when the step or
// anything before it changes, including the content of the files COPY and
// ADD read from the build context. A builder reuses the layer of a step
// whose key it has already built, and rebuilds from the first step whose
// key is new.
//
// The package only parses and hashes; running steps is the builder's job.
// ENV values, WORKDIR and COPY/ADD destinations are kept as written, with
// quotes and $VARIABLE references, because their values can depend on the
// base image's environment; the builder resolves them with Expand.
package airfile

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Caps on what Parse accepts.
const (
	// MaxFileBytes is the largest Airfile.
	MaxFileBytes = 1 << 20
	// MaxSteps is the most steps (the base instruction included) one
	// Airfile may have; every RUN, COPY and ADD can become a layer.
	MaxSteps = 128
	// MaxLineBytes is the longest instruction, continuation lines joined.
	MaxLineBytes = 64 << 10
)

// Kind is the instruction of a step, in upper case.
type Kind string

// The instructions an Airfile may use.
const (
	KindFrom    Kind = "FROM"
	KindDebian  Kind = "DEBIAN"
	KindRun     Kind = "RUN"
	KindCopy    Kind = "COPY"
	KindAdd     Kind = "ADD"
	KindEnv     Kind = "ENV"
	KindWorkdir Kind = "WORKDIR"
	KindUser    Kind = "USER"
)

// BaseKind says where a build's first layer comes from.
type BaseKind string

// The kinds of base.
const (
	// BaseTemplate is an existing Airlock template (FROM template:NAME).
	BaseTemplate BaseKind = "template"
	// BaseImage is an OCI image (FROM REFERENCE).
	BaseImage BaseKind = "image"
	// BaseDebian is a Debian root filesystem (DEBIAN SUITE PACKAGES...).
	BaseDebian BaseKind = "debian"
)

// Base is the starting point of a build, from its FROM or DEBIAN step.
type Base struct {
	Kind BaseKind
	// Template is the template name (BaseTemplate).
	Template string
	// Image is the image reference as written (BaseImage). Only its
	// syntax has been checked.
	Image string
	// Suite and Packages describe a Debian base (BaseDebian); Packages
	// are in the order written and were checked with
	// debian.ValidatePackage.
	Suite    string
	Packages []string
}

// EnvVar is one variable an ENV step sets. Value is as written: quotes,
// backslash escapes and $references are not yet processed (see Expand).
type EnvVar struct {
	Key   string
	Value string
}

// Step is one instruction of an Airfile.
//
// Args by Kind:
//
//	FROM     [reference]            (template:NAME or an image reference)
//	DEBIAN   [suite, package...]
//	RUN      [command]              shell form, run as /bin/sh -c command
//	         [argv0, argv1...]      exec form (Exec is true)
//	COPY/ADD [source..., dest]      sources relative to the build context
//	ENV      ["KEY=value"...]       as written; Env holds the same pairs
//	WORKDIR  [path]                 as written; relative to the previous one
//	USER     [user[:group]]         names or numeric ids
type Step struct {
	Kind Kind
	// Line is the 1-based line where the instruction starts.
	Line int
	Args []string
	// Exec is true for a RUN in JSON (exec) form.
	Exec bool
	// Chown is the --chown value of COPY and ADD ("" for root:root):
	// user[:group], names or numeric ids; names are resolved in the layer
	// below by the builder.
	Chown string
	// Env lists the pairs of an ENV step in order.
	Env []EnvVar
	// Base is set for the FROM or DEBIAN step.
	Base *Base

	// legacyEnv marks `ENV key value` (one pair, value to end of line).
	legacyEnv bool
}

// Sources returns the source arguments of a COPY or ADD step.
func (s Step) Sources() []string {
	if (s.Kind != KindCopy && s.Kind != KindAdd) || len(s.Args) < 2 {
		return nil
	}
	return s.Args[:len(s.Args)-1]
}

// Dest returns the destination argument of a COPY or ADD step, as written.
func (s Step) Dest() string {
	if (s.Kind != KindCopy && s.Kind != KindAdd) || len(s.Args) < 2 {
		return ""
	}
	return s.Args[len(s.Args)-1]
}

// Argv returns the command a RUN step executes: its exec-form argv, or
// /bin/sh -c with its shell-form command.
func (s Step) Argv() []string {
	if s.Kind != KindRun {
		return nil
	}
	if s.Exec {
		return append([]string(nil), s.Args...)
	}
	return []string{"/bin/sh", "-c", s.Args[0]}
}

// String renders the step as one canonical Airfile instruction (no line
// continuations). Parsing it gives back the same step; the cache key
// hashes it.
func (s Step) String() string {
	switch s.Kind {
	case KindRun:
		if s.Exec {
			return "RUN " + jsonList(s.Args)
		}
		return "RUN " + s.Args[0]
	case KindCopy, KindAdd:
		flags := ""
		if s.Chown != "" {
			flags = "--chown=" + s.Chown + " "
		}
		return string(s.Kind) + " " + flags + jsonList(s.Args)
	case KindEnv:
		if s.legacyEnv {
			return "ENV " + s.Env[0].Key + " " + s.Env[0].Value
		}
	}
	return string(s.Kind) + " " + strings.Join(s.Args, " ")
}

// jsonList renders args as a JSON array of strings.
func jsonList(args []string) string {
	b, err := json.Marshal(args)
	if err != nil {
		panic(err) // strings always marshal
	}
	return string(b)
}

// File is a parsed Airfile.
type File struct {
	// Steps are the instructions in order; Steps[0] is FROM or DEBIAN.
	Steps []Step
	// Ignored are the Dockerfile instructions that mean nothing for a
	// template (EXPOSE, LABEL, MAINTAINER, CMD, ENTRYPOINT, HEALTHCHECK,
	// STOPSIGNAL), in order: accepted so that a Dockerfile builds
	// unchanged, never steps (they change no cache key), and reported to
	// the user.
	Ignored []Ignored
}

// Ignored is an instruction Parse accepted without a step.
type Ignored struct {
	// Line is where it starts; Instruction is its keyword in upper case
	// and Text the whole logical line (at most 200 bytes).
	Line        int
	Instruction string
	Text        string
	// Reason says why it means nothing here.
	Reason string
}

// String says, for people, that the instruction was ignored and why.
func (i Ignored) String() string {
	return fmt.Sprintf("airfile line %d: %s is ignored: %s", i.Line, i.Instruction, i.Reason)
}

// Base returns the base of the build (from Steps[0]).
func (f *File) Base() Base {
	return *f.Steps[0].Base
}

// String renders the file canonically, one instruction per line.
func (f *File) String() string {
	var b strings.Builder
	for _, s := range f.Steps {
		b.WriteString(s.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// Error is a problem with an Airfile, at Line (0 when the file as a whole
// is at fault). It wraps errdefs.ErrInvalidArgument.
type Error struct {
	Line int
	Msg  string
}

// Error implements error.
func (e *Error) Error() string {
	if e.Line == 0 {
		return "airfile: " + e.Msg
	}
	return fmt.Sprintf("airfile line %d: %s", e.Line, e.Msg)
}

// Unwrap returns the error class.
func (e *Error) Unwrap() error { return errdefs.ErrInvalidArgument }

// errorf returns an *Error at line.
func errorf(line int, format string, args ...any) error {
	return &Error{Line: line, Msg: fmt.Sprintf(format, args...)}
}

// clip shortens s for error messages.
func clip(s string) string {
	const n = 60
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
