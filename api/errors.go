package api

// The public error codes: ErrorDetail.Code of every error response (a
// status of 400 or more) and of a stream's error line. The set is stable
// and part of the API contract; it is the enum of the Error schema in
// openapi.yaml. The status each code comes with is noted beside it.
const (
	CodeInvalidArgument      = "invalid_argument"       // 400
	CodeUnauthenticated      = "unauthenticated"        // 401
	CodePermissionDenied     = "permission_denied"      // 403: the key lacks a scope, or the sandbox refused
	CodeNotFound             = "not_found"              // 404: also a sandbox of another tenant
	CodeMethodNotAllowed     = "method_not_allowed"     // 405
	CodeAlreadyExists        = "already_exists"         // 409
	CodeFailedPrecondition   = "failed_precondition"    // 409: e.g. the sandbox is not running
	CodeRequestTooLarge      = "request_too_large"      // 413
	CodeUnsupportedMediaType = "unsupported_media_type" // 415
	CodeUpgradeRequired      = "upgrade_required"       // 426: a WebSocket route asked without the upgrade
	CodeRateLimited          = "rate_limited"           // 429: the key's request rate
	CodeResourceExhausted    = "resource_exhausted"     // 429: a quota or capacity
	CodeCanceled             = "canceled"               // 499: the client went away
	CodeInternal             = "internal"               // 500
	CodeNotSupported         = "not_supported"          // 501
	CodeBadGateway           = "bad_gateway"            // 502: nothing answered on a sandbox's port
	CodeUnavailable          = "unavailable"            // 503
	CodeTimeout              = "timeout"                // 504
)

// Error is the body of every error response (a status of 400 or more),
// and the error object of a stream's error line is its ErrorDetail.
type Error struct {
	// Error says what went wrong.
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is an error: a stable code and a message for people.
type ErrorDetail struct {
	// Code is the stable public error code, one of the Code constants.
	Code string `json:"code"`
	// Message says what went wrong, free of host details.
	Message string `json:"message"`
}

// StreamError is the last line of a stream (exec, code, a followed
// process, a template build) that broke after it started, and the error
// frame of a PTY session: {"type":"error","error":{...}}.
type StreamError struct {
	// Type is "error".
	Type string `json:"type"`
	// Error says what went wrong.
	Error ErrorDetail `json:"error"`
}
