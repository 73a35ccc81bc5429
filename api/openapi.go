// Package api holds the description of Airlock's REST API,
// openapi.yaml (OpenAPI 3.1, written as JSON, which is also YAML), and
// embeds it so that the daemon serves the very same bytes at
// GET /v1/openapi.json. internal/api's tests keep it equal to the routes
// the daemon serves.
package api

import _ "embed"

// OpenAPI is the content of openapi.yaml: a JSON document.
//
//go:embed openapi.yaml
var OpenAPI []byte
