// Package api holds the description of Airlock's REST API: its wire
// types, the JSON bodies the daemon (internal/api) sends and accepts and
// the Go client (package client) decodes and sends, and openapi.yaml
// (OpenAPI 3.1, written as JSON, which is also YAML), which it embeds so
// that the daemon serves the very same bytes at GET /v1/openapi.json.
// This package's tests keep each schema of openapi.yaml equal to the JSON
// fields of its Go type, and each enum equal to the Go constants of its
// values; internal/api's keep its paths equal to the routes the daemon
// serves. It imports nothing of the module, so that the public
// client can import it.
package api

import _ "embed"

// OpenAPI is the content of openapi.yaml: a JSON document.
//
//go:embed openapi.yaml
var OpenAPI []byte
