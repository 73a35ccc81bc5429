package api

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/auth"
	"github.com/airlock-sandbox/airlock/internal/egress"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/template"
	"github.com/airlock-sandbox/airlock/internal/template/registry"
	"github.com/airlock-sandbox/airlock/internal/tracing"
)

// Caps and names of build requests.
const (
	// maxImageRef caps the from field.
	maxImageRef = 1024
	// maxCredential caps each registry credential.
	maxCredential = 8192
	// maxLogText caps one log line of a build stream.
	maxLogText = 16 << 10
	// maxInstructionText caps the instruction of a step line.
	maxInstructionText = 4096
	// progressEvery is the least time between two progress lines of one
	// layer (the first and the last always go out).
	progressEvery = 200 * time.Millisecond
	// registryAuthHeader carries registry credentials with a build
	// context upload: base64 of {"username","password"} or {"token"}.
	registryAuthHeader = "X-Registry-Auth"
	// tarType is the media type of a build context upload.
	tarType = "application/x-tar"
)

// checkRegistryAuth validates credentials: a username with a password, or
// a token, or nothing.
func checkRegistryAuth(a registry.Credentials) error {
	for _, f := range []struct{ name, v string }{{"username", a.Username}, {"password", a.Password}, {"token", a.Token}} {
		if len(f.v) > maxCredential {
			return invalidf("registry_auth.%s is longer than %d bytes", f.name, maxCredential)
		}
		if strings.ContainsFunc(f.v, unicode.IsControl) {
			return invalidf("registry_auth.%s must not contain control characters", f.name)
		}
	}
	switch {
	case a.Token != "" && (a.Username != "" || a.Password != ""):
		return invalidf("registry_auth takes a token or a username and password, not both")
	case (a.Username == "") != (a.Password == ""):
		return invalidf("registry_auth needs both a username and a password")
	}
	return nil
}

// parseRecipe parses text as an Airfile (see registry.ParseRecipe),
// saying how to send a build context where the recipe needs one.
func parseRecipe(text string, withContext bool, shift int) (*registry.Recipe, error) {
	r, err := registry.ParseRecipe(text, withContext, shift)
	var nc *registry.NeedsContextError
	if errors.As(err, &nc) {
		return nil, invalidf("%s; send the context as a tar (Content-Type: %s) with the Airfile at its root", nc.Error(), tarType)
	}
	return r, err
}

// buildFromJSON validates a JSON build request and turns it into a
// build request and its parsed recipe. The base is from (an image
// reference or template:NAME) or debian; airfile adds steps (without COPY
// or ADD: a JSON request has no build context), or, without from and
// debian, is the whole recipe including its base. shared builds a
// template for every tenant (the operator only); otherwise the template
// is the caller's tenant's.
func buildFromJSON(in wire.BuildTemplateRequest) (registry.BuildRequest, *registry.Recipe, error) {
	out := registry.BuildRequest{Name: in.Name, Shared: in.Shared, Replace: in.Replace, NoCache: in.NoCache, AllowSetuid: in.AllowSetuid, Insecure: in.Insecure}
	if in.Name == "" {
		return out, nil, invalidf("name is required")
	}
	if err := template.ValidateName(in.Name); err != nil {
		return out, nil, invalidf("name must match %s", template.NamePattern)
	}
	if in.RegistryAuth != nil {
		out.Registry = registry.Credentials{Username: in.RegistryAuth.Username, Password: in.RegistryAuth.Password, Token: in.RegistryAuth.Token}
	}
	if err := checkRegistryAuth(out.Registry); err != nil {
		return out, nil, err
	}
	var err error
	if out.Limits, err = limitsFrom(in.Limits, "limits."); err != nil {
		return out, nil, err
	}
	var base string
	switch {
	case in.From != "" && in.Debian != nil:
		return out, nil, invalidf("give either from or debian, not both")
	case in.From != "":
		if len(in.From) > maxImageRef || strings.ContainsFunc(in.From, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) {
			return out, nil, invalidf("from must be one image reference (at most %d bytes, no blanks)", maxImageRef)
		}
		base = "FROM " + in.From
	case in.Debian != nil:
		if base, err = registry.DebianBase(in.Debian.Suite, in.Debian.Packages); err != nil {
			return out, nil, err
		}
	case strings.TrimSpace(in.Airfile) == "":
		return out, nil, invalidf("give from (an image), debian (a suite and packages) or airfile (a recipe)")
	}
	text, shift := in.Airfile, 0
	if base != "" {
		text, shift = base+"\n"+in.Airfile, 1
	}
	f, err := parseRecipe(text, false, shift)
	if err != nil {
		return out, nil, err
	}
	out.Airfile = []byte(text)
	return out, f, nil
}

// buildFromQuery parses the query of a build context upload: name
// (required), shared, replace, no_cache, allow_setuid and insecure
// (booleans), and the template's limits cpus, memory_mb, disk_mb and pids
// (its network, a JSON object, is read by templateNetworkQuery; its
// toolsets and command_policy by templateDefaultsQuery).
func buildFromQuery(raw string) (registry.BuildRequest, error) {
	var out registry.BuildRequest
	q, err := parseQuery(raw, "name", "shared", "replace", "no_cache", "allow_setuid", "insecure", "cpus", "memory_mb", "disk_mb", "pids", "network", "toolsets", "command_policy")
	if err != nil {
		return out, err
	}
	var lj wire.Limits
	if s := q.Get("cpus"); s != "" {
		if lj.CPUs, err = strconv.ParseFloat(s, 64); err != nil {
			return out, invalidf("cpus must be a number")
		}
	}
	for _, f := range []struct {
		key string
		dst *int64
	}{{"memory_mb", &lj.MemoryMB}, {"disk_mb", &lj.DiskMB}, {"pids", &lj.Pids}} {
		if s := q.Get(f.key); s != "" {
			if *f.dst, err = strconv.ParseInt(s, 10, 64); err != nil {
				return out, invalidf("%s must be an integer", f.key)
			}
		}
	}
	if out.Limits, err = limitsFrom(&lj, ""); err != nil {
		return out, err
	}
	out.Name = q.Get("name")
	if out.Name == "" {
		return out, invalidf("the name query parameter is required")
	}
	if err := template.ValidateName(out.Name); err != nil {
		return out, invalidf("name must match %s", template.NamePattern)
	}
	for _, b := range []struct {
		key string
		dst *bool
	}{{"shared", &out.Shared}, {"replace", &out.Replace}, {"no_cache", &out.NoCache}, {"allow_setuid", &out.AllowSetuid}, {"insecure", &out.Insecure}} {
		if s := q.Get(b.key); s != "" {
			v, err := strconv.ParseBool(s)
			if err != nil {
				return out, invalidf("%s must be true or false", b.key)
			}
			*b.dst = v
		}
	}
	return out, nil
}

// templateNetworkFrom validates a build's network (nil: none given) as a
// sandbox's, limits within ceiling, and without credentials (see
// sandbox.TemplateNetwork).
func templateNetworkFrom(in *wire.Network, ceiling egress.Limits) (*registry.Network, error) {
	if in == nil {
		return nil, nil
	}
	n, err := networkFrom(in, "network.", ceiling)
	if err != nil {
		return nil, err
	}
	tn, err := sandbox.TemplateNetwork(n)
	if err != nil {
		return nil, err
	}
	return &tn, nil
}

// maxNetworkQuery caps the network query parameter of a build context
// upload.
const maxNetworkQuery = 64 << 10

// templateNetworkQuery is templateNetworkFrom of the network query
// parameter of a build context upload, a Network JSON object ("": none).
func templateNetworkQuery(raw string, ceiling egress.Limits) (*registry.Network, error) {
	if raw == "" {
		return nil, nil
	}
	if len(raw) > maxNetworkQuery {
		return nil, invalidf("network is longer than %d bytes", maxNetworkQuery)
	}
	var in wire.Network
	if err := decodeJSONBytes([]byte(raw), &in, false); err != nil {
		return nil, invalidf("network must be a JSON object with mode, allow and limits")
	}
	return templateNetworkFrom(&in, ceiling)
}

// parseRegistryAuthHeader decodes the X-Registry-Auth header (base64,
// standard or URL alphabet, padded or not, of a registry_auth object).
func parseRegistryAuthHeader(vals []string) (registry.Credentials, error) {
	var out registry.Credentials
	switch len(vals) {
	case 0:
		return out, nil
	case 1:
	default:
		return out, invalidf("%s is given more than once", registryAuthHeader)
	}
	s := strings.TrimRight(strings.TrimSpace(vals[0]), "=")
	var raw []byte
	var err error
	if strings.ContainsAny(s, "-_") {
		raw, err = base64.RawURLEncoding.DecodeString(s)
	} else {
		raw, err = base64.RawStdEncoding.DecodeString(s)
	}
	if err != nil {
		return out, invalidf("%s must be base64 of a JSON object", registryAuthHeader)
	}
	var a wire.RegistryAuth
	if err := decodeJSONBytes(raw, &a, false); err != nil {
		return out, invalidf("%s must be base64 of a JSON object with username and password, or token", registryAuthHeader)
	}
	out = registry.Credentials(a)
	return out, checkRegistryAuth(out)
}

// setNamespace puts req in the caller p's tenant, or, if it asks for a
// shared template, in the shared namespace, which only the operator may.
func setNamespace(p auth.Principal, req *registry.BuildRequest) error {
	if req.Shared {
		if !p.IsOperator() {
			return &apiError{status: http.StatusForbidden, code: CodePermissionDenied,
				msg: "only the operator builds shared templates; leave shared unset to build one of your tenant"}
		}
		req.Owner = ""
		return nil
	}
	owner, err := templateOwner(p)
	req.Owner = owner
	return err
}

// checkBase refuses what of the recipe only the operator may do: a
// registry pull (FROM IMAGE makes the daemon, as root, contact whatever
// host and port the reference names) and a plain-HTTP registry.
func checkBase(p auth.Principal, req registry.BuildRequest, r *registry.Recipe) error {
	if p.IsOperator() {
		return nil
	}
	msg := ""
	switch {
	case r.PullsImage():
		msg = "only the operator pulls images from registries; build FROM template:NAME (your own or a shared template) or DEBIAN, or ask the operator for a shared template of that image"
	case req.Insecure:
		msg = "only the operator may use a plain-HTTP registry"
	default:
		return nil
	}
	return &apiError{status: http.StatusForbidden, code: CodePermissionDenied, msg: msg}
}

// buildTemplate serves POST /v1/templates: a JSON request, or a build
// context (a tar with the Airfile at its root) with the parameters in
// the query. With Accept: application/x-ndjson the build's progress is
// streamed, ending with a "done" line holding the template or an "error"
// line; otherwise the response is the template once it is built.
func (h *Handler) buildTemplate(c *call) error {
	ts := h.tpl
	if ts == nil {
		return templatesNotServed()
	}
	mt := ""
	if ct := c.r.Header.Get("Content-Type"); ct != "" {
		var err error
		if mt, _, err = mime.ParseMediaType(ct); err != nil {
			mt = "?"
		}
	}
	switch {
	case mt == tarType:
		return h.buildContext(c, ts)
	case mt == "" || mt == "application/json" || strings.HasSuffix(mt, "+json"):
		var in wire.BuildTemplateRequest
		if err := c.decodeJSON(&in, false); err != nil {
			return err
		}
		c.ev.Target = auditTarget(in.Name)
		req, f, err := buildFromJSON(in)
		if err != nil {
			return err
		}
		if req.Network, err = templateNetworkFrom(in.Network, h.networkCeiling()); err != nil {
			return err
		}
		if req.Toolsets, err = templateToolsetsFrom(in.Toolsets, "toolsets"); err != nil {
			return err
		}
		if req.CommandPolicy, err = templateCommandPolicyFrom(in.CommandPolicy); err != nil {
			return err
		}
		if err := setNamespace(c.p, &req); err != nil {
			return err
		}
		if err := checkBase(c.p, req, f); err != nil {
			return err
		}
		job, err := ts.Reserve(req.Owner, req.Name, req.Replace)
		if err != nil {
			return err
		}
		defer job.Close()
		shift := 0
		if in.From != "" || in.Debian != nil {
			shift = 1
		}
		return h.runBuild(c, job, req, f, shift)
	}
	return &apiError{status: http.StatusUnsupportedMediaType, code: CodeUnsupportedMediaType,
		msg: "request body must be application/json or " + tarType}
}

// buildContext takes a build context upload: it validates the query,
// has the job unpack the tar, and builds from its Airfile.
func (h *Handler) buildContext(c *call, ts *registry.Service) error {
	limit, err := ts.MaxContextBytes()
	if err != nil {
		return err
	}
	req, err := buildFromQuery(c.r.URL.RawQuery)
	if err != nil {
		return err
	}
	if req.Network, err = templateNetworkQuery(c.r.URL.Query().Get("network"), h.networkCeiling()); err != nil {
		return err
	}
	if req.Toolsets, req.CommandPolicy, err = templateDefaultsQuery(c.r.URL.Query().Get("toolsets"), c.r.URL.Query().Get("command_policy")); err != nil {
		return err
	}
	c.ev.Target = req.Name
	if req.Registry, err = parseRegistryAuthHeader(c.r.Header.Values(registryAuthHeader)); err != nil {
		return err
	}
	if c.r.ContentLength > limit {
		return contextTooLarge(limit)
	}
	if err := setNamespace(c.p, &req); err != nil {
		return err
	}
	job, err := ts.Reserve(req.Owner, req.Name, req.Replace)
	if err != nil {
		return err
	}
	defer job.Close()
	idle := c.idleBody(http.MaxBytesReader(c.w, c.r.Body, limit))
	body := &uploadReader{r: idle}
	bc, err := job.ReceiveContext(c.r.Context(), body)
	idle.done()
	if err != nil {
		return uploadError(err, body.err, contextTooLarge(limit))
	}
	f, err := parseRecipe(string(bc.Airfile), true, 0)
	if err != nil {
		return err
	}
	if err := checkBase(c.p, req, f); err != nil {
		return err
	}
	req.Airfile = bc.Airfile
	c.ev.Details = map[string]any{"context_entries": bc.Entries, "context_bytes": bc.Bytes}
	return h.runBuild(c, job, req, f, 0)
}

// contextTooLarge is the error of a build context upload over limit bytes.
func contextTooLarge(limit int64) error {
	return &apiError{status: http.StatusRequestEntityTooLarge, code: CodeRequestTooLarge,
		msg: fmt.Sprintf("the build context is larger than the limit of %d bytes", limit)}
}

// uploadReader keeps the first error of the reader below, to tell a
// failed or oversized upload from a malformed one.
type uploadReader struct {
	r   io.Reader
	err error
}

func (e *uploadReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF && e.err == nil {
		e.err = err
	}
	return n, err
}

// uploadError is the answer to err, the failure of a job receiving an
// upload whose body failed with bodyErr (nil if it did not): tooLarge
// for a body over its cap, the body's failure, a 413 for an upload over
// one of the job's caps, else err.
func uploadError(err, bodyFail, tooLarge error) error {
	if bodyFail != nil {
		var mbe *http.MaxBytesError
		if errors.As(bodyFail, &mbe) {
			return tooLarge
		}
		return bodyErr(bodyFail)
	}
	var le *registry.LimitError
	if errors.As(err, &le) {
		return &apiError{status: http.StatusRequestEntityTooLarge, code: CodeRequestTooLarge, msg: le.Msg}
	}
	return err
}

// runBuild records the intent, builds, registers the template and
// answers (streamed or not). The instructions the Airfile has that mean
// nothing here are reported first, as warning lines (shift: the lines
// the API put before the client's text).
func (h *Handler) runBuild(c *call, job *registry.Job, req registry.BuildRequest, r *registry.Recipe, shift int) error {
	sum := sha256.Sum256(req.Airfile)
	if c.ev.Details == nil {
		c.ev.Details = map[string]any{}
	}
	d := c.ev.Details
	d["source"] = r.Base()
	d["steps"] = r.Steps()
	d["airfile_sha256"] = hex.EncodeToString(sum[:])
	d["no_cache"] = req.NoCache
	if req.Replace {
		d["replace"] = true
	}
	d["allow_setuid"] = req.AllowSetuid
	if req.Insecure {
		d["insecure"] = true
	}
	if req.Registry != (registry.Credentials{}) {
		d["registry_auth"] = true // never the credentials
	}
	if req.Shared {
		d["shared"] = true
	}
	if req.Network != nil {
		d["network"] = networkDetails(sandbox.NetworkOfTemplate(*req.Network))
	}
	if len(req.Toolsets) > 0 {
		d["toolsets"] = req.Toolsets
	}
	if req.CommandPolicy != nil {
		d["command_policy"] = commandPolicyJSON(req.CommandPolicy)
	}
	warnings := r.Ignored(shift)
	if len(warnings) > 0 {
		d["ignored_instructions"] = len(warnings)
	}
	return h.runTemplateJob(c, templateJob{owner: req.Owner, name: req.Name, shared: req.Shared, warnings: warnings,
		run: func(ctx context.Context, events func(registry.Event)) (registry.Detail, error) {
			ctx, span := tracing.Start(ctx, "template.build", tracing.KeyTemplate.String(req.Name), tracing.KeyBuildKind.String("build"))
			d, err := job.Build(ctx, req, events)
			tracing.End(span, err)
			h.metrics.TemplateBuild("build", resultCode(err))
			return d, err
		}})
}

// templateJob is a build or an import as runTemplateJob runs it.
type templateJob struct {
	owner, name string
	shared      bool
	// warnings go out first, as warning lines of a stream.
	warnings []string
	// run makes, stores and registers the template, and closes the
	// registry.Job before it returns; events is nil unless the answer is
	// a stream.
	run func(ctx context.Context, events func(registry.Event)) (registry.Detail, error)
}

// runTemplateJob records the intent, runs the job and answers: a stream
// of build lines ending in a done or error line (Accept:
// application/x-ndjson), else the template (201).
func (h *Handler) runTemplateJob(c *call, job templateJob) error {
	if err := c.begin(); err != nil {
		return err
	}
	location := "/v1/templates/" + job.name
	if job.shared {
		location += "?shared=true"
	}
	ctx, cancel := context.WithCancel(c.r.Context())
	defer cancel()
	if !wantsNDJSON(c.r) {
		d, err := job.run(ctx, nil)
		if err != nil {
			return err
		}
		addBuildDetails(c, d)
		if err := c.commit(); err != nil {
			return err
		}
		c.w.Header().Set("Location", location)
		return c.json(http.StatusCreated, toDetailJSON(d))
	}
	nw := &ndjsonWriter{c: c, rc: http.NewResponseController(c.w), idle: h.lim.WriteIdleTimeout, onFail: cancel}
	defer nw.done()
	if err := nw.start(); err != nil {
		return err // the client is gone
	}
	for _, w := range job.warnings {
		_ = nw.writeLine(wire.BuildStreamLine{Type: wire.BuildWarning, Text: capText(w, maxLogText)})
	}
	sink := &buildSink{write: func(l wire.BuildStreamLine) { _ = nw.writeLine(l) }, now: time.Now}
	d, err := job.run(ctx, sink.emit)
	sink.close()
	if err != nil {
		if code := nw.endWithError(err); code == CodeInternal || code == CodeUnavailable {
			h.log.Error("template build failed", "template", template.StoreName(job.owner, job.name), "err", err)
		}
		return nil // the stream has started: the error line reports it
	}
	addBuildDetails(c, d)
	c.record("ok")
	detail := toDetailJSON(d)
	_ = nw.writeLine(wire.BuildStreamLine{Type: wire.BuildDone, Template: &detail})
	return nil
}

// addBuildDetails records the built template in the audit event.
func addBuildDetails(c *call, d registry.Detail) {
	digests := make([]string, len(d.LayerList))
	for i, l := range d.LayerList {
		digests[i] = l.Digest
	}
	c.ev.Details["layers"] = digests
	c.ev.Details["size"] = d.Size
}

// buildSink turns builder events into stream lines: "done" events are
// dropped (the API sends its own once the template is usable), text is
// capped and made valid UTF-8, and progress lines of one layer are sent
// at most every progressEvery, except the first and the final one.
type buildSink struct {
	write func(wire.BuildStreamLine)
	now   func() time.Time

	mu     sync.Mutex
	closed bool
	last   map[[2]int]time.Time // by step and layer: when a progress line went out
}

type progressKey = [2]int

func (s *buildSink) emit(ev registry.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	line, ok := s.lineLocked(ev)
	if ok {
		s.write(line)
	}
}

// close drops events that arrive after the build returned.
func (s *buildSink) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}

func (s *buildSink) lineLocked(ev registry.Event) (wire.BuildStreamLine, bool) {
	line := wire.BuildStreamLine{Type: ev.Type, Step: max(ev.Step, 0), Steps: max(ev.Steps, 0)}
	switch ev.Type {
	case "step", "cached":
		line.Instruction = capText(ev.Instruction, maxInstructionText)
	case "log":
		line.Text = capText(strings.TrimRight(ev.Text, "\r\n"), maxLogText)
	case "progress":
		line.Layer, line.Layers = max(ev.Layer, 0), max(ev.Layers, 0)
		line.Done, line.Total = max(ev.Done, 0), max(ev.Total, 0)
		key := progressKey{ev.Step, ev.Layer}
		now := s.now()
		final := line.Total > 0 && line.Done >= line.Total
		if last, seen := s.last[key]; seen && !final && now.Sub(last) < progressEvery {
			return line, false
		}
		if s.last == nil {
			s.last = make(map[progressKey]time.Time)
		}
		s.last[key] = now
	default:
		return line, false
	}
	return line, true
}
