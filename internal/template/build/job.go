package build

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/account"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/template"
	"github.com/airlock-sandbox/airlock/internal/template/airfile"
	"github.com/airlock-sandbox/airlock/internal/template/layers"
)

// maxSourcePackages caps the Debian packages a template's Source names.
const maxSourcePackages = 8

// job is one build in progress.
type job struct {
	b     *Builder
	req   Request
	file  *airfile.File
	em    *emitter
	lease *layers.Lease

	layers []string      // diff IDs so far, lowest first
	cfg    layers.Config // env, workdir, user, cmd, entrypoint so far
	// base says what the build started from (resolveBase): an image
	// reference with its digest, "debian SUITE: packages" or
	// "template:NAME".
	base string
}

// source is the template's Manifest.Source, its provenance: the base
// alone when the Airfile has no other step (an image import, a Debian
// build), else "airfile (N steps) on BASE".
func (j *job) source() string {
	if n := len(j.file.Steps) - 1; n == 1 {
		return "airfile (1 step) on " + j.base
	} else if n > 1 {
		return fmt.Sprintf("airfile (%d steps) on %s", n, j.base)
	}
	if j.file.Base().Kind == airfile.BaseTemplate {
		return "airfile on " + j.base
	}
	return j.base
}

// debianSource describes a Debian base: the suite and its packages (the
// first maxSourcePackages).
func debianSource(b airfile.Base) string {
	s := "debian " + b.Suite
	if len(b.Packages) == 0 {
		return s
	}
	pk := b.Packages
	more := ""
	if len(pk) > maxSourcePackages {
		more = fmt.Sprintf(" +%d more", len(pk)-maxSourcePackages)
		pk = pk[:maxSourcePackages]
	}
	return s + ": " + strings.Join(pk, ", ") + more
}

// run executes the build and saves the template.
func (j *job) run(ctx context.Context) (layers.Manifest, error) {
	steps := j.file.Steps
	missed := j.req.NoCache // once a step misses, every later one runs
	baseID, err := j.resolveBase(ctx)
	if err != nil {
		return layers.Manifest{}, err
	}
	keys, err := j.file.CacheKeys(ctx, j.req.ContextDir, baseID)
	if err != nil {
		return layers.Manifest{}, err
	}
	if j.file.Base().Kind == airfile.BaseDebian {
		if err := j.debianBase(ctx, keys[0], &missed); err != nil {
			return layers.Manifest{}, err
		}
	}
	if n := len(j.layers) + countLayerSteps(steps); n > layers.MaxLayers {
		return layers.Manifest{}, fmt.Errorf("the template would have %d layers, at most %d are supported: %w", n, layers.MaxLayers, errdefs.ErrInvalidArgument)
	}
	for i := 1; i < len(steps); i++ {
		s := steps[i]
		ev := Event{Step: i + 1, Instruction: clip(s.String(), 512)}
		switch s.Kind {
		case airfile.KindEnv, airfile.KindUser:
			if err := j.applyConfig(s); err != nil {
				return layers.Manifest{}, err
			}
			if s.Kind == airfile.KindUser {
				if err := j.checkUser(s.Line); err != nil {
					return layers.Manifest{}, err
				}
			}
			ev.Type = EventStep
			if !missed {
				ev.Type = EventCached
			}
			j.em.emit(ev)
			continue
		case airfile.KindWorkdir:
			if err := j.applyConfig(s); err != nil {
				return layers.Manifest{}, err
			}
		}
		if !missed {
			if e, ok := j.b.cache.get(keys[i]); ok {
				have := e.Layer == ""
				if !have {
					if have, err = j.lease.Has(e.Layer); err != nil {
						return layers.Manifest{}, err
					}
				}
				if have {
					if e.Layer != "" {
						j.layers = append(j.layers, e.Layer)
					}
					ev.Type = EventCached
					j.em.emit(ev)
					continue
				}
				j.b.log.Debug("build cache: layer is gone; rebuilding", "step", i+1, "layer", e.Layer)
			}
			missed = true
		}
		ev.Type = EventStep
		j.em.emit(ev)
		var layer string
		switch s.Kind {
		case airfile.KindRun:
			layer, err = j.runStep(ctx, i+1, s)
		case airfile.KindCopy, airfile.KindAdd:
			layer, err = j.copyStep(ctx, s)
		case airfile.KindWorkdir:
			layer, err = j.workdirStep(ctx, s)
		default:
			err = fmt.Errorf("airfile line %d: unexpected %s step: %w", s.Line, s.Kind, errdefs.ErrInvalidArgument)
		}
		if err != nil {
			return layers.Manifest{}, err
		}
		if layer != "" {
			j.layers = append(j.layers, layer)
		}
		j.b.cache.put(keys[i], layer)
	}
	return j.save(ctx)
}

// countLayerSteps is the most layers the steps after the base can add.
func countLayerSteps(steps []airfile.Step) int {
	n := 0
	for _, s := range steps[1:] {
		switch s.Kind {
		case airfile.KindRun, airfile.KindCopy, airfile.KindAdd, airfile.KindWorkdir:
			n++
		}
	}
	return n
}

// save stores the manifest and registers the template.
func (j *job) save(ctx context.Context) (layers.Manifest, error) {
	if len(j.layers) == 0 {
		return layers.Manifest{}, fmt.Errorf("the build produced no layers: %w", errdefs.ErrInvalidArgument)
	}
	if err := ctx.Err(); err != nil {
		return layers.Manifest{}, ctxErr(ctx, "build")
	}
	j.cfg.Limits = j.req.Limits.Over(j.cfg.Limits)
	if n := j.req.Network; n != nil {
		c := *n
		c.Allow = slices.Clone(n.Allow)
		j.cfg.Network = &c
	}
	if len(j.req.Toolsets) > 0 {
		j.cfg.Toolsets = slices.Clone(j.req.Toolsets)
	}
	if p := j.req.CommandPolicy; p != nil {
		j.cfg.CommandPolicy = layers.ClonePolicy(p)
	}
	m := layers.Manifest{
		Name:   j.storeName(),
		Layers: slices.Clone(j.layers),
		Config: j.cfg,
		Source: j.source(),
	}
	saved, err := j.b.cfg.Store.Put(ctx, m, layers.PutOptions{Replace: true})
	if err != nil {
		return layers.Manifest{}, err
	}
	src, err := template.NewStored(j.b.cfg.Store, j.storeName())
	if err == nil {
		err = j.b.cfg.Templates.Replace(src)
	}
	if err != nil {
		return layers.Manifest{}, fmt.Errorf("template %q saved but not registered: %w", j.req.Name, err)
	}
	return saved, nil
}

// storeName is the name the template is stored and registered under.
func (j *job) storeName() string { return template.StoreName(j.req.Owner, j.req.Name) }

// applyConfig applies an ENV, USER or WORKDIR step to the config.
func (j *job) applyConfig(s airfile.Step) error {
	switch s.Kind {
	case airfile.KindEnv:
		// Values see the environment as it was before the step (as in
		// Dockerfiles: ENV a=1 b=$a gives b the old a).
		lookup := j.lookupEnv(slices.Clone(j.cfg.Env))
		for _, kv := range s.Env {
			v, err := airfile.Expand(kv.Value, lookup)
			if err != nil {
				return fmt.Errorf("airfile line %d: ENV %s: %v: %w", s.Line, kv.Key, err, errdefs.ErrInvalidArgument)
			}
			if strings.IndexByte(v, 0) >= 0 {
				return fmt.Errorf("airfile line %d: ENV %s: NUL byte in the value: %w", s.Line, kv.Key, errdefs.ErrInvalidArgument)
			}
			j.cfg.Env = setEnv(j.cfg.Env, kv.Key, v)
		}
		if err := j.cfg.Validate(); err != nil {
			return fmt.Errorf("airfile line %d: %w", s.Line, err)
		}
	case airfile.KindUser:
		j.cfg.User = s.Args[0]
		if err := j.cfg.Validate(); err != nil {
			return fmt.Errorf("airfile line %d: %w", s.Line, err)
		}
	case airfile.KindWorkdir:
		w, err := airfile.Expand(s.Args[0], j.lookupEnv(j.cfg.Env))
		if err != nil {
			return fmt.Errorf("airfile line %d: WORKDIR: %v: %w", s.Line, err, errdefs.ErrInvalidArgument)
		}
		if w == "" || strings.IndexByte(w, 0) >= 0 || len(w) > 4096 {
			return fmt.Errorf("airfile line %d: WORKDIR: bad path: %w", s.Line, errdefs.ErrInvalidArgument)
		}
		if !path.IsAbs(w) {
			w = path.Join(j.workdir(), w)
		}
		j.cfg.Workdir = path.Clean(w)
	}
	return nil
}

// workdir is the working directory of the next step: WORKDIR or /.
func (j *job) workdir() string {
	if j.cfg.Workdir == "" {
		return "/"
	}
	return j.cfg.Workdir
}

// lookupEnv returns a variable lookup over env (KEY=value entries).
func (j *job) lookupEnv(env []string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		for i := len(env) - 1; i >= 0; i-- {
			if k, v, _ := strings.Cut(env[i], "="); k == name {
				return v, true
			}
		}
		return "", false
	}
}

// setEnv sets key in env, dropping an earlier value.
func setEnv(env []string, key, value string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); k != key {
			out = append(out, kv)
		}
	}
	return append(out, key+"="+value)
}

// checkUser checks that the current USER exists in the image so far,
// so that a bad USER fails on its own line rather than at the next RUN.
func (j *job) checkUser(line int) error {
	dirs, err := j.layerDirs()
	if err != nil {
		return fmt.Errorf("airfile line %d: USER: %w", line, err)
	}
	if _, _, err := userIDs(newStack(dirs), j.cfg.User); err != nil {
		return fmt.Errorf("airfile line %d: USER: %w", line, err)
	}
	return nil
}

// userIDs returns the ids a USER value runs as in the image st, looked
// up as the runtime looks it up when a sandbox starts; root for "".
func userIDs(st *stack, user string) (int, int, error) {
	if user == "" {
		return 0, 0, nil
	}
	db, err := st.accountDB()
	if err != nil {
		return 0, 0, err
	}
	u, err := account.Resolve(user, db)
	if err != nil {
		return 0, 0, err
	}
	return int(u.UID), int(u.GID), nil
}
