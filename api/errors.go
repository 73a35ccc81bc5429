package api

// Error is the body of every error response (a status of 400 or more),
// and the error object of a stream's error line is its ErrorDetail.
type Error struct {
	// Error says what went wrong.
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is an error: a stable code and a message for people.
type ErrorDetail struct {
	// Code is the stable public error code, e.g. "not_found"; the set is
	// the enum of the Error schema in openapi.yaml.
	Code string `json:"code"`
	// Message says what went wrong, free of host details.
	Message string `json:"message"`
}
