package build

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/template"
	"github.com/airlock-sandbox/airlock/internal/template/airfile"
	"github.com/airlock-sandbox/airlock/internal/template/debian"
	"github.com/airlock-sandbox/airlock/internal/template/layers"
	"github.com/airlock-sandbox/airlock/internal/template/oci"
)

// setidPolicy names the set-id policy of req for cache keys: a layer
// made under one policy must not be reused under a stricter one.
func (j *job) setidPolicy() string {
	switch {
	case j.req.AllowSetuid:
		return "allow"
	case j.req.StripSetuid:
		return "strip"
	}
	return "reject"
}

// extractOptions are the options of every layer the build makes.
func (j *job) extractOptions() layers.ExtractOptions {
	return layers.ExtractOptions{AllowSetuid: j.req.AllowSetuid, StripSetuid: j.req.StripSetuid}
}

// resolveBase prepares the base and returns the id the cache keys start
// from. Image and template bases are resolved here (their layers pinned,
// their config taken); a Debian base is only identified, and built later
// unless cached.
func (j *job) resolveBase(ctx context.Context) (string, error) {
	base := j.file.Base()
	line := j.file.Steps[0].Line
	var id string
	switch base.Kind {
	case airfile.BaseTemplate:
		m, err := j.templateBase(base.Template, line)
		if err != nil {
			return "", err
		}
		sum := sha256.New()
		if err := json.NewEncoder(sum).Encode(struct {
			Layers []string
			Config layers.Config
		}{m.Layers, m.Config}); err != nil {
			return "", fmt.Errorf("base id: %w", errdefs.ErrInternal)
		}
		id = "template:" + hex.EncodeToString(sum.Sum(nil))
		j.base = "template:" + base.Template
	case airfile.BaseImage:
		digest, err := j.imageBase(ctx, base.Image, line)
		if err != nil {
			return "", err
		}
		id = "image:" + digest
	case airfile.BaseDebian:
		id = "debian:" + debian.CacheKey(j.debianOptions(base))
		j.base = debianSource(base)
	default:
		return "", fmt.Errorf("airfile line %d: unknown base: %w", line, errdefs.ErrInvalidArgument)
	}
	id += "\nsetid:" + j.setidPolicy()
	if j.req.Owner != "" {
		// Each owner's steps are cached apart from everyone else's.
		id += "\nowner:" + j.req.Owner
	}
	return id, nil
}

// templateBase starts the build from a stored template.
func (j *job) templateBase(name string, line int) (layers.Manifest, error) {
	src, err := j.b.cfg.Templates.Lookup(j.req.Owner, name)
	if err != nil {
		return layers.Manifest{}, fmt.Errorf("airfile line %d: FROM template:%s: %w", line, name, err)
	}
	st, ok := src.(*template.Stored)
	if !ok {
		if name == template.HostName {
			return layers.Manifest{}, fmt.Errorf("airfile line %d: the host template cannot be a base: its system directories are read-only views of the host, not layers; use DEBIAN or an image: %w", line, errdefs.ErrInvalidArgument)
		}
		return layers.Manifest{}, fmt.Errorf("airfile line %d: template %q is not a stored template and cannot be a base: %w", line, name, errdefs.ErrInvalidArgument)
	}
	m, err := st.Manifest()
	if err != nil {
		return layers.Manifest{}, fmt.Errorf("airfile line %d: FROM template:%s: %w", line, name, err)
	}
	for _, d := range m.Layers {
		ok, err := j.lease.Has(d)
		if err != nil {
			return layers.Manifest{}, err
		}
		if !ok {
			return layers.Manifest{}, fmt.Errorf("airfile line %d: template %q has lost a layer; rebuild it: %w", line, name, errdefs.ErrFailedPrecondition)
		}
	}
	j.layers = slices.Clone(m.Layers)
	j.cfg = m.Config
	j.em.emit(Event{Type: EventCached, Step: 1, Instruction: clip(j.file.Steps[0].String(), 512)})
	return m, nil
}

// imageBase pulls the base image (layers the store has are not
// downloaded) and returns its digest.
func (j *job) imageBase(ctx context.Context, ref string, line int) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, j.b.cfg.StepTimeout)
	defer cancel()
	instr := clip(j.file.Steps[0].String(), 512)
	opts := j.req.Pull
	opts.Replace = false
	opts.AllowSetuid, opts.StripSetuid = j.req.AllowSetuid, j.req.StripSetuid
	started := false
	th := throttle{}
	opts.Progress = func(p oci.Progress) {
		if p.Skipped {
			return
		}
		if !started {
			started = true
			j.em.emit(Event{Type: EventStep, Step: 1, Instruction: instr})
		}
		if th.due(p.Done, p.Final) {
			j.em.emit(Event{Type: EventProgress, Step: 1, Layer: p.Layer, Layers: p.Layers, Done: p.Done, Total: p.Total})
		}
	}
	res, err := oci.PullInto(ctx, j.lease, ref, opts)
	if err != nil {
		return "", fmt.Errorf("airfile line %d: FROM %s: %w", line, clip(ref, 100), err)
	}
	if !started {
		j.em.emit(Event{Type: EventCached, Step: 1, Instruction: instr})
	}
	j.layers = slices.Clone(res.Manifest.Layers)
	j.cfg = res.Manifest.Config
	j.base = "image " + res.Manifest.Source // the reference with its digest
	return res.Digest, nil
}

// debianOptions are the Debian build options of base.
func (j *job) debianOptions(base airfile.Base) debian.Options {
	o := j.b.cfg.Debian
	o.Suite = base.Suite
	o.Packages = slices.Clone(base.Packages)
	o.Target, o.Progress = "", nil
	o.Timeout = j.b.cfg.StepTimeout
	return o
}

// debianBase builds the Debian root filesystem (unless cached) and makes
// it the first layer.
func (j *job) debianBase(ctx context.Context, key string, missed *bool) error {
	step := j.file.Steps[0]
	ev := Event{Step: 1, Instruction: clip(step.String(), 512)}
	if !*missed {
		if e, ok := j.b.cache.get(key); ok && e.Layer != "" {
			have, err := j.lease.Has(e.Layer)
			if err != nil {
				return err
			}
			if have {
				j.layers = []string{e.Layer}
				ev.Type = EventCached
				j.em.emit(ev)
				return nil
			}
		}
		*missed = true
	}
	ev.Type = EventStep
	j.em.emit(ev)
	scratch, err := os.MkdirTemp(j.b.cfg.WorkDir, scratchPrefix+"debian-")
	if err != nil {
		return fmt.Errorf("scratch directory: %w", errdefs.ErrInternal)
	}
	defer func() {
		if err := os.RemoveAll(scratch); err != nil {
			j.b.log.Warn("template build: removing the Debian tree", "err", err)
		}
	}()
	o := j.debianOptions(*step.Base)
	o.Target = filepath.Join(scratch, "rootfs")
	o.Progress = func(line string) { j.em.emit(Event{Type: EventLog, Step: 1, Text: line}) }
	if err := debian.Build(ctx, o); err != nil {
		return fmt.Errorf("airfile line %d: %w", step.Line, err)
	}
	// Debian's set-id programs (su, mount, ...) do nothing in a sandbox
	// mounted nosuid: strip them unless the request keeps them.
	opts := layers.ExtractOptions{AllowSetuid: j.req.AllowSetuid, StripSetuid: !j.req.AllowSetuid}
	layer, err := j.extractTree(ctx, 1, o.Target, opts)
	if err != nil {
		return fmt.Errorf("airfile line %d: storing the Debian tree: %w", step.Line, err)
	}
	j.layers = []string{layer}
	j.b.cache.put(key, layer)
	return nil
}

// extractTree streams the directory tree dir as a layer tar into the
// store and returns the layer's diff ID.
func (j *job) extractTree(ctx context.Context, step int, dir string, opts layers.ExtractOptions) (string, error) {
	total, err := treeSize(ctx, dir)
	if err != nil {
		return "", err
	}
	th := throttle{}
	progress := func(done int64, final bool) {
		if th.due(done, final) {
			j.em.emit(Event{Type: EventProgress, Step: step, Layer: 1, Layers: 1, Done: done, Total: total})
		}
	}
	return j.extractStream(ctx, opts, func(ctx context.Context, w io.Writer) error {
		return writeTree(ctx, w, dir, progress)
	})
}

// extractStream runs produce, which writes a layer tar, and extracts what
// it writes into the store, without holding the tar anywhere. It returns
// the layer's diff ID. When both fail, the error of the one that failed
// first is returned.
func (j *job) extractStream(ctx context.Context, opts layers.ExtractOptions, produce func(ctx context.Context, w io.Writer) error) (string, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	var (
		wg       sync.WaitGroup
		prodErr  error
		prodDone = make(chan struct{})
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		err := produce(ctx, pw)
		prodErr = err
		close(prodDone) // before the extraction can see the end of the stream
		pw.CloseWithError(err)
	}()
	info, err := j.lease.Extract(ctx, pr, opts)
	producerFailed := false
	select {
	case <-prodDone:
		producerFailed = prodErr != nil
	default:
	}
	// Unblock the producer if the extraction stopped early.
	pr.CloseWithError(errExtractStopped)
	cancel()
	wg.Wait()
	if producerFailed {
		return "", prodErr
	}
	if err != nil {
		return "", err
	}
	return info.DiffID, nil
}

// errExtractStopped tells a producer that nobody reads its tar anymore.
var errExtractStopped = fmt.Errorf("layer extraction stopped: %w", errdefs.ErrCanceled)

// throttle limits progress events to one per 250 ms or 8 MiB, plus the
// final one.
type throttle struct {
	last     time.Time
	lastDone int64
}

func (t *throttle) due(done int64, final bool) bool {
	now := time.Now()
	if !final && now.Sub(t.last) < 250*time.Millisecond && done-t.lastDone < 8<<20 {
		return false
	}
	t.last, t.lastDone = now, done
	return true
}
