package client

import (
	"archive/tar"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/api"
)

// maxBuildLine caps one line of a streamed build (the done line carries
// the template with its configuration).
const maxBuildLine = 8 << 20

// errRequestDone stops the writer of a build context once the request is
// over.
var errRequestDone = errors.New("airlock: request finished")

// maxAirfileBytes caps an Airfile the client reads from disk (the
// server's own cap).
const maxAirfileBytes = 1 << 20

// Template is a root filesystem sandboxes can be created from. A template
// belongs to one tenant, which alone sees and uses it, or is shared by
// every tenant (the built-in ones and those the server's operator
// builds). A name resolves to the caller's tenant's template first, then
// the shared one.
type Template struct {
	Name string `json:"name"`
	// Shared is true for a template every tenant sees, false for one of
	// the caller's tenant.
	Shared bool `json:"shared"`
	// Source says where a stored template came from (an image reference
	// with its digest, a build); "built-in" for the daemon's own ones.
	Source string `json:"source"`
	// Builtin is true for the daemon's own templates (host), which are
	// not stored and cannot be removed.
	Builtin bool `json:"builtin"`
	// Layers counts the distinct layers; Size is their size in bytes and
	// SharedBytes the part of it that other templates the caller sees
	// share.
	Layers      int   `json:"layers"`
	Size        int64 `json:"size"`
	SharedBytes int64 `json:"shared_bytes"`
	// Created is zero for built-in templates.
	Created time.Time `json:"created,omitzero"`
}

// TemplateLayer is one layer of a template: its digest (the layer's diff
// ID, "sha256:<hex>"), size, files and whether another template the
// caller sees uses it too.
type TemplateLayer = api.TemplateLayer

// TemplateConfig holds the defaults a template's sandboxes start with;
// its Limits (nil when it sets none) are what a sandbox's unset limits
// take before the server's defaults, its Network (nil when it has none)
// what a sandbox created without a network gets, its Toolsets what one
// created without tools and toolsets is granted, and its CommandPolicy
// what one created without a command policy gets.
type TemplateConfig = api.TemplateConfig

// TemplateDetail is a template with its layers and configuration.
type TemplateDetail struct {
	Template
	// LayerList holds the layers, lowest first.
	LayerList []TemplateLayer `json:"layer_list"`
	Config    TemplateConfig  `json:"config"`
}

// TemplateUsage is the disk use of a server's template store; each layer
// counts once however many templates and sandboxes use it.
type TemplateUsage = api.TemplateUsage

// TemplateList is the answer of ListTemplates.
type TemplateList struct {
	Templates []Template    `json:"templates"`
	Usage     TemplateUsage `json:"usage"`
}

// FreedSpace is what removing a template deleted from disk.
type FreedSpace struct {
	Layers int   `json:"freed_layers"`
	Bytes  int64 `json:"freed_bytes"`
}

// freedSpaceFrom is the FreedSpace that the wire form d describes.
func freedSpaceFrom(d *api.TemplateDeleted) *FreedSpace {
	return &FreedSpace{Layers: d.FreedLayers, Bytes: d.FreedBytes}
}

// RegistryAuth holds credentials for an image registry: a username and
// password, or a bearer token.
type RegistryAuth = api.RegistryAuth

// DebianBase is a Debian root filesystem built from Suite with Packages.
type DebianBase = api.DebianBase

// BuildTemplateRequest describes a template to build without a build
// context: give From (an image reference, or "template:NAME") or Debian,
// with optional Airfile steps (RUN, ENV, WORKDIR, USER), or an Airfile
// with its own FROM or DEBIAN line. Pulling an image from a registry
// (From an image reference, or an Airfile's FROM IMAGE) is the
// operator's: other keys get ErrForbidden.
type BuildTemplateRequest = api.BuildTemplateRequest

// templateFrom is the Template that the wire form t describes.
func templateFrom(t *api.Template) Template {
	out := Template{Name: t.Name, Shared: t.Shared, Source: t.Source, Builtin: t.Builtin,
		Layers: t.Layers, Size: t.Size, SharedBytes: t.SharedBytes}
	if t.Created != nil {
		out.Created = *t.Created
	}
	return out
}

// templateDetailFrom is the TemplateDetail that the wire form d
// describes.
func templateDetailFrom(d *api.TemplateDetail) *TemplateDetail {
	return &TemplateDetail{Template: templateFrom(&d.Template), LayerList: d.LayerList, Config: d.Config}
}

// BuildContextRequest describes a build from an Airfile and a local
// build context directory, which COPY and ADD read from.
type BuildContextRequest struct {
	Name string
	// Shared is as for BuildTemplateRequest.
	Shared  bool
	Replace bool
	// Airfile is the recipe. If empty, the file Airfile at the root of
	// ContextDir is used. Either way the recipe is sent as the context's
	// Airfile, in place of any file of that name at its root.
	Airfile []byte
	// ContextDir is the build context directory.
	ContextDir   string
	AllowSetuid  bool
	NoCache      bool
	Insecure     bool
	RegistryAuth *RegistryAuth
	// Limits are the template's default limits, as for BuildTemplate.
	Limits *Limits
	// Network is the template's default network policy, as for
	// BuildTemplate (sent as the network query parameter).
	Network *Network
	// Toolsets and CommandPolicy are the template's default toolsets and
	// command policy, as for BuildTemplate (sent as the toolsets and
	// command_policy query parameters).
	Toolsets      []string
	CommandPolicy *CommandPolicy
}

// The types of build events.
const (
	BuildStep     = api.BuildStep     // a step starts
	BuildCached   = api.BuildCached   // a step's layer comes from the cache
	BuildLog      = api.BuildLog      // a line of a step's output
	BuildProgress = api.BuildProgress // bytes of a layer being pulled or stored
	BuildWarning  = api.BuildWarning  // a note before the steps (Text): an Airfile instruction that is ignored
)

// BuildEvent is one progress report of a build.
type BuildEvent struct {
	// Type is one of the Build* constants.
	Type string `json:"type"`
	// Step is the 1-based step of Steps; Instruction is its text (step,
	// cached).
	Step        int    `json:"step"`
	Steps       int    `json:"steps"`
	Instruction string `json:"instruction"`
	// Text is a line of output (log) or the warning (warning).
	Text string `json:"text"`
	// Layer of Layers, with Done of Total bytes (progress; Total is 0
	// when unknown).
	Layer  int   `json:"layer"`
	Layers int   `json:"layers"`
	Done   int64 `json:"done"`
	Total  int64 `json:"total"`
}

// checkTemplateName rejects names that cannot name a template before a
// request is sent.
func checkTemplateName(name string) error {
	if name == "" || strings.ContainsAny(name, "/?#") {
		return fmt.Errorf("airlock: template name %q is not valid: %w", name, ErrInvalid)
	}
	return nil
}

// ListTemplates returns the templates the caller sees (the shared ones and
// its tenant's) and the disk use of their layers (of the whole store for
// the operator). It needs the templates:read scope.
func (c *Client) ListTemplates(ctx context.Context) (*TemplateList, error) {
	var out api.TemplateList
	if err := c.doJSON(ctx, http.MethodGet, "/v1/templates", nil, nil, &out, http.StatusOK); err != nil {
		return nil, err
	}
	list := &TemplateList{Usage: out.Usage}
	if out.Templates != nil {
		list.Templates = make([]Template, 0, len(out.Templates))
	}
	for i := range out.Templates {
		list.Templates = append(list.Templates, templateFrom(&out.Templates[i]))
	}
	return list, nil
}

// GetTemplate returns the template called name: the caller's tenant's,
// else the shared one. It needs the templates:read scope.
func (c *Client) GetTemplate(ctx context.Context, name string) (*TemplateDetail, error) {
	return c.getTemplate(ctx, name, false)
}

// GetSharedTemplate returns the shared template called name, even when the
// caller's tenant has one of that name.
func (c *Client) GetSharedTemplate(ctx context.Context, name string) (*TemplateDetail, error) {
	return c.getTemplate(ctx, name, true)
}

// sharedQuery is the query of a template route: shared=true asks for the
// shared template of the name, not the caller's tenant's.
func sharedQuery(shared bool) url.Values {
	if !shared {
		return nil
	}
	return url.Values{"shared": {"true"}}
}

func (c *Client) getTemplate(ctx context.Context, name string, shared bool) (*TemplateDetail, error) {
	if err := checkTemplateName(name); err != nil {
		return nil, err
	}
	var out api.TemplateDetail
	if err := c.doJSON(ctx, http.MethodGet, "/v1/templates/"+url.PathEscape(name), sharedQuery(shared), nil, &out, http.StatusOK); err != nil {
		return nil, err
	}
	return templateDetailFrom(&out), nil
}

// DeleteTemplate removes the template called name (the caller's tenant's,
// else the shared one, which only the operator may remove: ErrForbidden)
// and reports what was freed. A template that a sandbox uses, and a
// built-in one, cannot be removed (ErrConflict). It needs the
// templates:write scope.
func (c *Client) DeleteTemplate(ctx context.Context, name string) (*FreedSpace, error) {
	return c.deleteTemplate(ctx, name, false)
}

// DeleteSharedTemplate removes the shared template called name, even when
// the caller's tenant has one of that name. Only the operator may.
func (c *Client) DeleteSharedTemplate(ctx context.Context, name string) (*FreedSpace, error) {
	return c.deleteTemplate(ctx, name, true)
}

func (c *Client) deleteTemplate(ctx context.Context, name string, shared bool) (*FreedSpace, error) {
	if err := checkTemplateName(name); err != nil {
		return nil, err
	}
	var out api.TemplateDeleted
	if err := c.doJSON(ctx, http.MethodDelete, "/v1/templates/"+url.PathEscape(name), sharedQuery(shared), nil, &out, http.StatusOK); err != nil {
		return nil, err
	}
	return freedSpaceFrom(&out), nil
}

// BuildTemplate builds (or imports) a template and returns it once it is
// usable. onEvent, if not nil, is called with the build's progress as it
// comes, from one goroutine; if it returns an error the request is
// dropped, which cancels the build, and that error is returned. A name in
// use is ErrConflict. It needs the templates:write scope (and the
// operator's for a shared template or a registry pull).
func (c *Client) BuildTemplate(ctx context.Context, req BuildTemplateRequest, onEvent func(BuildEvent) error) (*TemplateDetail, error) {
	if err := checkTemplateName(req.Name); err != nil {
		return nil, err
	}
	var tpl *TemplateDetail
	if err := streamJSON(ctx, c, "/v1/templates", req, "build stream", maxBuildLine, onBuildLine(&tpl, onEvent)); err != nil {
		return nil, err
	}
	return tpl, nil
}

// BuildTemplateContext builds a template from an Airfile and the local
// directory req.ContextDir, which is sent as a tar stream while it is
// read (never held in memory whole): directories, regular files and
// symbolic links, with their permission bits but not their owners; other
// kinds of files (sockets, devices, fifos) are left out. Hard links are
// sent as copies. onEvent is as for BuildTemplate.
func (c *Client) BuildTemplateContext(ctx context.Context, req BuildContextRequest, onEvent func(BuildEvent) error) (*TemplateDetail, error) {
	if err := checkTemplateName(req.Name); err != nil {
		return nil, err
	}
	if req.ContextDir == "" {
		return nil, fmt.Errorf("airlock: the build context directory is required: %w", ErrInvalid)
	}
	fi, err := os.Stat(req.ContextDir)
	if err != nil {
		return nil, fmt.Errorf("airlock: build context: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("airlock: build context %s is not a directory: %w", req.ContextDir, ErrInvalid)
	}
	recipe := req.Airfile
	if recipe == nil {
		if recipe, err = readAirfile(filepath.Join(req.ContextDir, "Airfile")); err != nil {
			return nil, err
		}
	}
	if len(recipe) > maxAirfileBytes {
		return nil, fmt.Errorf("airlock: the Airfile is larger than %d bytes: %w", maxAirfileBytes, ErrInvalid)
	}
	q := url.Values{"name": {req.Name}}
	for _, f := range []struct {
		key string
		on  bool
	}{{"shared", req.Shared}, {"replace", req.Replace}, {"allow_setuid", req.AllowSetuid}, {"no_cache", req.NoCache}, {"insecure", req.Insecure}} {
		if f.on {
			q.Set(f.key, strconv.FormatBool(true))
		}
	}
	if l := req.Limits; l != nil {
		if l.CPUs != 0 {
			q.Set("cpus", strconv.FormatFloat(l.CPUs, 'g', -1, 64))
		}
		for _, f := range []struct {
			key string
			v   int64
		}{{"memory_mb", l.MemoryMB}, {"disk_mb", l.DiskMB}, {"pids", l.Pids}} {
			if f.v != 0 {
				q.Set(f.key, strconv.FormatInt(f.v, 10))
			}
		}
	}
	if req.Network != nil {
		b, err := json.Marshal(req.Network)
		if err != nil {
			return nil, fmt.Errorf("airlock: network: %v: %w", err, ErrInvalid)
		}
		q.Set("network", string(b))
	}
	if len(req.Toolsets) > 0 {
		for _, ts := range req.Toolsets {
			if ts == "" || strings.Contains(ts, ",") {
				return nil, fmt.Errorf("airlock: toolset %q: names are not empty and hold no comma: %w", ts, ErrInvalid)
			}
		}
		q.Set("toolsets", strings.Join(req.Toolsets, ","))
	}
	if req.CommandPolicy != nil {
		b, err := json.Marshal(req.CommandPolicy)
		if err != nil {
			return nil, fmt.Errorf("airlock: command policy: %v: %w", err, ErrInvalid)
		}
		q.Set("command_policy", string(b))
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	tarErr := make(chan error, 1)
	go func() {
		err := writeContextTar(ctx, pw, req.ContextDir, recipe)
		pw.CloseWithError(err)
		tarErr <- err
	}()
	// The writer must be done (and the pipe closed) however this ends.
	finish := func() error {
		pr.CloseWithError(errRequestDone)
		err := <-tarErr
		tarErr <- err
		return err
	}
	defer finish()
	hdr := http.Header{"Content-Type": {"application/x-tar"}}
	if a := req.RegistryAuth; a != nil && *a != (RegistryAuth{}) {
		b, err := json.Marshal(a)
		if err != nil {
			return nil, fmt.Errorf("airlock: encode registry auth: %w", err)
		}
		hdr.Set("X-Registry-Auth", base64.URLEncoding.EncodeToString(b))
	}
	return c.templateStream(ctx, "/v1/templates", q, pr, hdr, finish, "build stream", onEvent)
}

// templateStream posts body to a template route that answers with a build
// stream (a build or an import) and reads it to the template it made.
// finish ends the goroutine feeding body and returns its error, which
// explains a failed request better than the request's own error.
func (c *Client) templateStream(ctx context.Context, path string, q url.Values, body io.Reader, hdr http.Header,
	finish func() error, what string, onEvent func(BuildEvent) error) (*TemplateDetail, error) {
	resp, err := c.openStream(ctx, path, q, body, hdr)
	if err != nil {
		if terr := finish(); terr != nil && !errors.Is(terr, errRequestDone) && !errors.Is(terr, io.ErrClosedPipe) {
			return nil, terr
		}
		return nil, err
	}
	defer resp.Body.Close()
	var tpl *TemplateDetail
	if err := readStream(resp.Body, what, maxBuildLine, onBuildLine(&tpl, onEvent)); err != nil {
		return nil, err
	}
	return tpl, nil
}

// ImportTemplateRequest imports a template from a `docker save` archive
// or an OCI image layout.
type ImportTemplateRequest struct {
	// Name is the new template's name.
	Name string
	// Path is a `docker save` archive (a tar file, as `docker save -o`
	// writes it), an OCI layout as a tar (an oci-archive), or an OCI
	// layout directory (sent as a tar of its files and directories).
	// Ignored when Archive is set.
	Path string
	// Archive, when set, is read and sent as is instead of Path: a tar
	// stream in one of the formats above (e.g. `docker save` on a pipe).
	Archive io.Reader
	// Tag picks the image of an archive that holds several: "repo:tag"
	// in a docker archive, the reference name of a layout's image.
	Tag string
	// Shared imports a template every tenant sees (the operator only);
	// Replace replaces a stored template of the name; AllowSetuid keeps
	// set-user-ID and set-group-ID bits (stripped otherwise).
	Shared, Replace, AllowSetuid bool
}

// ImportTemplate uploads an image archive or layout and imports it as a
// template, which is returned once usable. The upload is streamed (never
// held in memory whole); the server caps its size (8 GiB by default). No
// registry is contacted, so any key with templates:write may import.
// onEvent is as for BuildTemplate.
func (c *Client) ImportTemplate(ctx context.Context, req ImportTemplateRequest, onEvent func(BuildEvent) error) (*TemplateDetail, error) {
	if err := checkTemplateName(req.Name); err != nil {
		return nil, err
	}
	q := url.Values{}
	for _, f := range []struct {
		key string
		on  bool
	}{{"shared", req.Shared}, {"replace", req.Replace}, {"allow_setuid", req.AllowSetuid}} {
		if f.on {
			q.Set(f.key, "true")
		}
	}
	if req.Tag != "" {
		q.Set("tag", req.Tag)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	body := req.Archive
	finish := func() error { return nil }
	if body == nil {
		if req.Path == "" {
			return nil, fmt.Errorf("airlock: an archive path or reader is required: %w", ErrInvalid)
		}
		fi, err := os.Stat(req.Path)
		if err != nil {
			return nil, fmt.Errorf("airlock: image archive: %w", err)
		}
		if fi.IsDir() {
			if _, err := os.Stat(filepath.Join(req.Path, "oci-layout")); err != nil {
				return nil, fmt.Errorf("airlock: %s is a directory without an oci-layout file, not an OCI image layout: %w", req.Path, ErrInvalid)
			}
			pr, pw := io.Pipe()
			tarErr := make(chan error, 1)
			go func() {
				err := writeLayoutTar(ctx, pw, req.Path)
				pw.CloseWithError(err)
				tarErr <- err
			}()
			finish = func() error {
				pr.CloseWithError(errRequestDone)
				err := <-tarErr
				tarErr <- err
				return err
			}
			body = pr
		} else {
			f, err := os.Open(req.Path)
			if err != nil {
				return nil, fmt.Errorf("airlock: image archive: %w", err)
			}
			defer f.Close()
			body = f
		}
	}
	defer finish()
	path := "/v1/templates/" + url.PathEscape(req.Name) + "/import"
	return c.templateStream(ctx, path, q, body, http.Header{"Content-Type": {"application/x-tar"}}, finish, "import stream", onEvent)
}

// writeLayoutTar writes the OCI layout directory dir to w as a tar of its
// directories and regular files; anything else (a symbolic link) is an
// error, as the server refuses it.
func writeLayoutTar(ctx context.Context, w io.Writer, dir string) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("airlock: image layout: %w", err)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		name := filepath.ToSlash(rel)
		fi, err := d.Info()
		if err != nil {
			return fmt.Errorf("airlock: image layout: %w", err)
		}
		hdr := &tar.Header{Name: name, Mode: int64(fi.Mode().Perm()), ModTime: fi.ModTime()}
		switch {
		case fi.IsDir():
			hdr.Typeflag, hdr.Name = tar.TypeDir, name+"/"
			return tw.WriteHeader(hdr)
		case fi.Mode().IsRegular():
			return writeTarFile(tw, hdr, p, fi.Size())
		}
		return fmt.Errorf("airlock: image layout: %s is not a file or a directory: %w", name, ErrInvalid)
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// readAirfile reads the Airfile at path.
func readAirfile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("airlock: Airfile: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxAirfileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("airlock: Airfile: %w", err)
	}
	return b, nil
}

// buildEventFrom is the BuildEvent of a progress line.
func buildEventFrom(l *api.BuildStreamLine) BuildEvent {
	return BuildEvent{Type: l.Type, Step: l.Step, Steps: l.Steps, Instruction: l.Instruction, Text: l.Text,
		Layer: l.Layer, Layers: l.Layers, Done: l.Done, Total: l.Total}
}

// onBuildLine returns the line handler of a build stream: it passes
// progress to onEvent and keeps the template of the done line in *tpl.
func onBuildLine(tpl **TemplateDetail, onEvent func(BuildEvent) error) func(*api.BuildStreamLine) (bool, error) {
	return func(line *api.BuildStreamLine) (bool, error) {
		switch line.Type {
		case api.BuildDone:
			if line.Template == nil {
				return true, fmt.Errorf("airlock: build stream: done without a template: %w", ErrInternal)
			}
			*tpl = templateDetailFrom(line.Template)
			return true, nil
		case api.BuildError:
			return true, streamError(line.Error, "the build failed")
		}
		if onEvent != nil {
			return false, onEvent(buildEventFrom(line))
		}
		return false, nil
	}
}

// writeContextTar writes the build context dir to w as a tar stream: the
// recipe first as Airfile, then everything under dir but its own root
// Airfile. Symbolic links are not followed.
func writeContextTar(ctx context.Context, w io.Writer, dir string, recipe []byte) error {
	tw := tar.NewWriter(w)
	now := time.Now()
	if err := tw.WriteHeader(&tar.Header{Name: "Airfile", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(recipe)), ModTime: now}); err != nil {
		return err
	}
	if _, err := tw.Write(recipe); err != nil {
		return err
	}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("airlock: build context: %w", err)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if rel == "." || rel == "Airfile" {
			return nil
		}
		name := filepath.ToSlash(rel)
		fi, err := d.Info()
		if err != nil {
			return fmt.Errorf("airlock: build context: %w", err)
		}
		hdr := &tar.Header{Name: name, Mode: int64(fi.Mode().Perm()), ModTime: fi.ModTime()}
		switch {
		case fi.IsDir():
			hdr.Typeflag, hdr.Name = tar.TypeDir, name+"/"
			return tw.WriteHeader(hdr)
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return fmt.Errorf("airlock: build context: %w", err)
			}
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
			return tw.WriteHeader(hdr)
		case fi.Mode().IsRegular():
			return writeTarFile(tw, hdr, p, fi.Size())
		}
		return nil // sockets, devices, fifos
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// writeTarFile writes the regular file at p of size bytes.
func writeTarFile(tw *tar.Writer, hdr *tar.Header, p string, size int64) error {
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("airlock: build context: %w", err)
	}
	defer f.Close()
	hdr.Typeflag, hdr.Size = tar.TypeReg, size
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	n, err := io.Copy(tw, io.LimitReader(f, size))
	if err != nil {
		return fmt.Errorf("airlock: build context: %s: %w", hdr.Name, err)
	}
	if n != size {
		return fmt.Errorf("airlock: build context: %s changed while it was being sent", hdr.Name)
	}
	return nil
}
