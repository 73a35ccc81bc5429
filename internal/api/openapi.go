package api

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"time"

	apidoc "github.com/airlock-sandbox/airlock/api"
)

// openAPIETag is the entity tag of the served description: a digest of
// its bytes, which change only with the binary.
var openAPIETag = func() string {
	sum := sha256.Sum256(apidoc.OpenAPI)
	return `"` + hex.EncodeToString(sum[:16]) + `"`
}()

// openAPI serves GET /v1/openapi.json: api/openapi.yaml as embedded in the
// binary, byte for byte (it is JSON). It needs no key: it describes the
// API and holds nothing that is not in the public source; a browser tool
// (Swagger UI, a client generator) can fetch it. Conditional requests
// (If-None-Match) are answered 304.
func (h *Handler) openAPI(c *call) error {
	if c.r.URL.RawQuery != "" {
		return invalidf("this route takes no query parameters")
	}
	hdr := c.w.Header()
	hdr.Set("Content-Type", "application/json")
	hdr.Set("Cache-Control", "no-cache")
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("ETag", openAPIETag)
	http.ServeContent(c.w, c.r, "openapi.json", time.Time{}, bytes.NewReader(apidoc.OpenAPI))
	return nil
}
