package registry

import (
	"errors"
	"fmt"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/template/airfile"
	"github.com/airlock-sandbox/airlock/internal/template/debian"
)

// Recipe is the parsed Airfile of a build request: what the caller needs
// to know of it before the build (who may run it, what to record).
type Recipe struct {
	f *airfile.File
}

// NeedsContextError is the error of a recipe whose COPY or ADD at Line
// (the caller's numbering) would read a build context the request does
// not have. It wraps errdefs.ErrInvalidArgument.
type NeedsContextError struct {
	Line int
	Kind string // "COPY" or "ADD"
}

func (e *NeedsContextError) Error() string {
	return fmt.Sprintf("airfile line %d: %s needs a build context", e.Line, e.Kind)
}

func (e *NeedsContextError) Unwrap() error { return errdefs.ErrInvalidArgument }

// ParseRecipe parses text as an Airfile. withContext tells whether COPY
// and ADD can read a build context (a *NeedsContextError otherwise);
// shift is the number of lines the caller put before its client's text,
// so that errors name the client's lines. Errors wrap
// errdefs.ErrInvalidArgument.
func ParseRecipe(text string, withContext bool, shift int) (*Recipe, error) {
	f, err := airfile.Parse(strings.NewReader(text))
	if err != nil {
		var ae *airfile.Error
		if errors.As(err, &ae) {
			if ae.Line > shift {
				return nil, fmt.Errorf("airfile line %d: %s: %w", ae.Line-shift, ae.Msg, errdefs.ErrInvalidArgument)
			}
			return nil, fmt.Errorf("airfile: %s: %w", ae.Msg, errdefs.ErrInvalidArgument)
		}
		return nil, err
	}
	if !withContext {
		for _, s := range f.Steps {
			if s.Kind == airfile.KindCopy || s.Kind == airfile.KindAdd {
				return nil, &NeedsContextError{Line: s.Line - shift, Kind: string(s.Kind)}
			}
		}
	}
	return &Recipe{f: f}, nil
}

// PullsImage tells whether the recipe starts from a registry image (the
// daemon then contacts whatever host the reference names).
func (r *Recipe) PullsImage() bool { return r.f.Base().Kind == airfile.BaseImage }

// Base says what the recipe starts from, for the audit log:
// "template:NAME", an image reference, or "debian SUITE (N packages)".
func (r *Recipe) Base() string {
	b := r.f.Base()
	switch b.Kind {
	case airfile.BaseTemplate:
		return "template:" + b.Template
	case airfile.BaseImage:
		return b.Image
	case airfile.BaseDebian:
		return fmt.Sprintf("debian %s (%d packages)", b.Suite, len(b.Packages))
	}
	return string(b.Kind)
}

// Steps is the number of the recipe's steps, its base included.
func (r *Recipe) Steps() int { return len(r.f.Steps) }

// Ignored says, one line each, the instructions the recipe has that mean
// nothing here, with the caller's line numbers (shift as in ParseRecipe).
func (r *Recipe) Ignored(shift int) []string {
	var out []string
	for _, ig := range r.f.Ignored {
		ig.Line -= shift
		out = append(out, ig.String())
	}
	return out
}

// DebianBase validates a Debian base (a suite and packages) and returns
// its Airfile line ("DEBIAN suite package..."). Errors wrap
// errdefs.ErrInvalidArgument and name the request's fields (debian.suite,
// debian.packages).
func DebianBase(suite string, packages []string) (string, error) {
	if err := debian.ValidateSuite(suite); err != nil {
		return "", fmt.Errorf("debian.suite must be a release or suite name such as bookworm: %w", errdefs.ErrInvalidArgument)
	}
	if len(packages) > debian.MaxPackages {
		return "", fmt.Errorf("debian.packages has more than %d packages: %w", debian.MaxPackages, errdefs.ErrInvalidArgument)
	}
	for _, p := range packages {
		if err := debian.ValidatePackage(p); err != nil {
			if len(p) > 80 {
				p = p[:80]
			}
			return "", fmt.Errorf("debian.packages: %q is not a Debian package name: %w", p, errdefs.ErrInvalidArgument)
		}
	}
	return strings.Join(append([]string{"DEBIAN", suite}, packages...), " "), nil
}
