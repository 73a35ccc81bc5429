// Package e2b serves E2B's wire protocol at Airlock's edge, so that code
// written for the e2b and @e2b/code-interpreter SDKs runs unchanged
// against Airlock: set E2B_API_URL and E2B_SANDBOX_URL to the listener
// this package serves, and E2B_API_KEY to an Airlock API key in E2B's
// form (e2b_ and the key's bytes in hex; see Key).
//
// It is a translator and nothing more. Every request it takes becomes
// one or more requests to Airlock's own public API, made with the
// caller's key through the Go client, so that authentication, scopes,
// tenancy, validation, limits and the audit log are exactly those of
// the API: the core does not learn about E2B, and E2B callers get no
// door the API does not have.
//
// One listener serves both of E2B's surfaces:
//
//   - the control plane (E2B's REST API: POST /sandboxes, GET
//     /v2/sandboxes, /sandboxes/{id}, /timeout, /connect, DELETE,
//     GET /health), keyed by X-API-Key;
//   - sandbox traffic, routed by the E2b-Sandbox-Id and E2b-Sandbox-Port
//     headers the SDKs send when E2B_SANDBOX_URL is set, or by a
//     {port}-{id}.{domain} host name where a domain is configured: envd's
//     surface (port 49983: Connect process.Process and
//     filesystem.Filesystem, /files, /health) and the code interpreter's
//     (port 49999: /execute, /contexts), translated onto Airlock's exec,
//     process, file and code-context routes, and any other port through
//     Airlock's port proxy.
//
// E2B's sandbox IDs are [a-z0-9]+, so an Airlock ID sb-XXXX is shown as
// sbXXXX (ToE2BID, FromE2BID).
package e2b
