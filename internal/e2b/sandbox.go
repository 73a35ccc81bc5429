package e2b

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"path"
	"strings"

	"github.com/airlock-sandbox/airlock/client"
)

// Bounds of sandbox traffic this layer handles itself.
const (
	// maxUploadParts caps the files of one multipart upload.
	maxUploadParts = 1000
)

// serveSandbox serves a request of sandbox traffic for t: envd's port,
// the code interpreter's, or any other port through the port proxy.
func (h *Handler) serveSandbox(w http.ResponseWriter, r *http.Request, t target) {
	c, err := h.client(r)
	if err != nil {
		envdError(w, http.StatusUnauthorized, "an access token is required: X-Access-Token with the envdAccessToken the sandbox was created with")
		return
	}
	switch t.port {
	case EnvdPort:
		h.serveEnvd(w, r, c, t.id)
	case JupyterPort:
		h.serveJupyter(w, r, c, t.id)
	default:
		h.proxyPort(w, r, c, t)
	}
}

// envdError writes envd's error body.
func envdError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, struct {
		Message string `json:"message"`
		Code    int    `json:"code"`
	}{msg, status})
}

// envdFail writes err as envd does; a sandbox that is gone is 502, which
// the SDKs read as "the sandbox probably timed out".
func envdFail(w http.ResponseWriter, err error) {
	status, msg := statusOf(err)
	if errors.Is(err, client.ErrConflict) {
		status = http.StatusBadGateway // the sandbox ended
	}
	envdError(w, status, msg)
}

// serveEnvd serves envd's surface: /health, /files and the Connect
// services.
func (h *Handler) serveEnvd(w http.ResponseWriter, r *http.Request, c *client.Client, id string) {
	switch {
	case r.URL.Path == "/health" && r.Method == http.MethodGet:
		if _, err := live(r.Context(), c, id); err != nil {
			envdError(w, http.StatusBadGateway, "the sandbox is not running")
			return
		}
		w.WriteHeader(http.StatusNoContent)
	case r.URL.Path == "/files" && r.Method == http.MethodGet:
		h.download(w, r, c, id)
	case r.URL.Path == "/files" && r.Method == http.MethodPost:
		h.upload(w, r, c, id)
	case strings.HasPrefix(r.URL.Path, "/process.Process/"), strings.HasPrefix(r.URL.Path, "/filesystem.Filesystem/"):
		h.serveConnect(w, r, c, id)
	default:
		envdError(w, http.StatusNotFound, fmt.Sprintf("%s %s is not served", r.Method, clip(r.URL.Path)))
	}
}

// fileUser maps envd's username onto Airlock's file user: "user" and
// "root" are the sandbox's users; empty is its default user.
func fileUser(r *http.Request) (client.FileOption, error) {
	u := r.URL.Query().Get("username")
	if u == "" {
		u = basicUser(r)
	}
	switch u {
	case "", "user", "root":
		return client.AsUser(u), nil
	}
	return nil, fmt.Errorf("user %q does not exist in this sandbox (user or root)", clip(u))
}

// basicUser is the user of a Basic Authorization header ("user:"), as
// the SDKs send it to choose the user.
func basicUser(r *http.Request) string {
	u, _, ok := r.BasicAuth()
	if !ok {
		return ""
	}
	return u
}

// download serves GET /files?path=&username=: the file's bytes.
func (h *Handler) download(w http.ResponseWriter, r *http.Request, c *client.Client, id string) {
	p := r.URL.Query().Get("path")
	if p == "" {
		envdError(w, http.StatusBadRequest, "path is required")
		return
	}
	user, err := fileUser(r)
	if err != nil {
		envdError(w, http.StatusUnauthorized, err.Error())
		return
	}
	body, err := c.ReadFile(r.Context(), id, p, user)
	if err != nil {
		envdFail(w, err)
		return
	}
	defer body.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", mime.FormatMediaType("inline", map[string]string{"filename": path.Base(p)}))
	w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(w, body)
}

// uploaded is one file of an upload's answer.
type uploaded struct {
	Path string `json:"path"`
	Name string `json:"name"`
	Type string `json:"type"`
}

// upload serves POST /files?path=&username=: an octet-stream body is the
// file at path; a multipart body holds "file" parts, each written to
// path, or, without path, to the path its filename carries.
func (h *Handler) upload(w http.ResponseWriter, r *http.Request, c *client.Client, id string) {
	user, err := fileUser(r)
	if err != nil {
		envdError(w, http.StatusUnauthorized, err.Error())
		return
	}
	p := r.URL.Query().Get("path")
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt != "multipart/form-data" {
		if p == "" {
			envdError(w, http.StatusBadRequest, "path is required for a body that is not multipart")
			return
		}
		var body io.Reader = r.Body
		switch enc := r.Header.Get("Content-Encoding"); enc {
		case "", "identity":
		case "gzip":
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				envdError(w, http.StatusBadRequest, "the gzip body is malformed")
				return
			}
			defer zr.Close()
			body = zr
		default:
			envdError(w, http.StatusBadRequest, fmt.Sprintf("content encoding %q is not supported (gzip or none)", clip(enc)))
			return
		}
		fi, err := c.WriteFile(r.Context(), id, p, body, user)
		if err != nil {
			envdFail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, []uploaded{{Path: fi.Path, Name: fi.Name, Type: "file"}})
		return
	}
	mr := multipart.NewReader(r.Body, params["boundary"])
	out := []uploaded{}
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			envdError(w, http.StatusBadRequest, "the multipart body is malformed")
			return
		}
		if part.FormName() != "file" {
			_ = part.Close()
			continue
		}
		if len(out) == maxUploadParts {
			envdError(w, http.StatusBadRequest, fmt.Sprintf("an upload holds at most %d files", maxUploadParts))
			return
		}
		dst := p
		if dst == "" {
			// The filename carries the whole path: Part.FileName keeps
			// only its last element.
			_, dp, err := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
			if err == nil {
				dst = dp["filename"]
			}
		}
		if dst == "" {
			envdError(w, http.StatusBadRequest, "a file part has no path: give path, or the path as the part's filename")
			return
		}
		fi, err := c.WriteFile(r.Context(), id, dst, part, user)
		_ = part.Close()
		if err != nil {
			envdFail(w, err)
			return
		}
		out = append(out, uploaded{Path: fi.Path, Name: fi.Name, Type: "file"})
	}
	writeJSON(w, http.StatusOK, out)
}

// proxyPort sends a request for another port to the sandbox's server
// there, through Airlock's port proxy.
func (h *Handler) proxyPort(w http.ResponseWriter, r *http.Request, c *client.Client, t target) {
	out := r.Clone(r.Context())
	out.Header.Del("X-Access-Token")
	out.Header.Del("X-API-Key")
	out.Header.Del("E2b-Sandbox-Id")
	out.Header.Del("E2b-Sandbox-Port")
	resp, err := c.Port(t.id, t.port, out)
	if err != nil {
		envdError(w, http.StatusBadGateway, "the sandbox's port could not be reached")
		return
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			_ = rc.Flush()
		}
		if err != nil {
			return
		}
	}
}
