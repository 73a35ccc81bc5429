package api

import (
	"context"
	"fmt"
	"mime"
	"net/http"
	"regexp"
	"strconv"

	"github.com/airlock-sandbox/airlock/internal/template/registry"
	"github.com/airlock-sandbox/airlock/internal/tracing"
)

// maxImportTag caps the tag query parameter of an import.
const maxImportTag = 256

// tagRe is what a tag may hold: a reference name, no blanks or controls.
var tagRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/:@+-]*$`)

// importFromQuery parses the query of POST /v1/templates/{name}/import:
// shared, replace and allow_setuid (booleans) and tag.
func importFromQuery(raw string) (registry.ImportRequest, error) {
	var out registry.ImportRequest
	q, err := parseQuery(raw, "shared", "replace", "allow_setuid", "tag")
	if err != nil {
		return out, err
	}
	for _, b := range []struct {
		key string
		dst *bool
	}{{"shared", &out.Shared}, {"replace", &out.Replace}, {"allow_setuid", &out.AllowSetuid}} {
		if s := q.Get(b.key); s != "" {
			v, err := strconv.ParseBool(s)
			if err != nil {
				return out, invalidf("%s must be true or false", b.key)
			}
			*b.dst = v
		}
	}
	out.Tag = q.Get("tag")
	if out.Tag != "" && (len(out.Tag) > maxImportTag || !tagRe.MatchString(out.Tag)) {
		return out, invalidf("tag must be an image name or tag (at most %d characters: letters, digits and ._/:@+-)", maxImportTag)
	}
	return out, nil
}

// importTemplate serves POST /v1/templates/{name}/import: the body is a
// `docker save` archive or an OCI image layout as a tar stream, capped in
// size, which the job receives and checks (see registry.Job.ReceiveImage)
// and imports as the caller's tenant's template (or, with shared, the
// operator's shared one). Answered like a build: streamed progress with
// Accept: application/x-ndjson, else the template.
func (h *Handler) importTemplate(c *call) error {
	ts := h.tpl
	if ts == nil {
		return templatesNotServed()
	}
	limit, err := ts.MaxImportBytes()
	if err != nil {
		return err
	}
	name, err := templateName(c)
	if err != nil {
		return err
	}
	c.ev.Target = name
	if mt, _, err := mime.ParseMediaType(c.r.Header.Get("Content-Type")); err != nil || mt != tarType {
		return &apiError{status: http.StatusUnsupportedMediaType, code: CodeUnsupportedMediaType,
			msg: "request body must be " + tarType + ": a docker save archive or an OCI image layout as a tar"}
	}
	ireq, err := importFromQuery(c.r.URL.RawQuery)
	if err != nil {
		return err
	}
	if c.r.ContentLength > limit {
		return importTooLarge(limit)
	}
	breq := registry.BuildRequest{Name: name, Shared: ireq.Shared, Replace: ireq.Replace}
	if err := setNamespace(c.p, &breq); err != nil {
		return err
	}
	job, err := ts.Reserve(breq.Owner, name, ireq.Replace)
	if err != nil {
		return err
	}
	defer job.Close()
	idle := c.idleBody(http.MaxBytesReader(c.w, c.r.Body, limit))
	body := &uploadReader{r: idle}
	img, err := job.ReceiveImage(c.r.Context(), body)
	idle.done()
	if err != nil {
		return uploadError(err, body.err, importTooLarge(limit))
	}
	c.ev.Details = map[string]any{"source": string(img.Format), "upload_bytes": img.Size, "allow_setuid": ireq.AllowSetuid}
	if ireq.Tag != "" {
		c.ev.Details["tag"] = ireq.Tag
	}
	if ireq.Replace {
		c.ev.Details["replace"] = true
	}
	if ireq.Shared {
		c.ev.Details["shared"] = true
	}
	return h.runTemplateJob(c, templateJob{owner: breq.Owner, name: name, shared: ireq.Shared,
		run: func(ctx context.Context, events func(registry.Event)) (registry.Detail, error) {
			ctx, span := tracing.Start(ctx, "template.build", tracing.KeyTemplate.String(name), tracing.KeyBuildKind.String("import"))
			d, err := job.Import(ctx, ireq, events)
			tracing.End(span, err)
			h.metrics.TemplateBuild("import", resultCode(err))
			return d, err
		}})
}

// importTooLarge is the error of an import upload over limit bytes.
func importTooLarge(limit int64) error {
	return &apiError{status: http.StatusRequestEntityTooLarge, code: CodeRequestTooLarge,
		msg: fmt.Sprintf("the image archive is larger than the limit of %d bytes", limit)}
}
