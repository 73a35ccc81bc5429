package api

import "time"

// PortURLRequest is the optional body of POST
// /v1/sandboxes/{id}/ports/{port}: how long the signed URL lasts.
type PortURLRequest struct {
	// TTLSeconds is the URL's lifetime; 0 means 600, at most 86400.
	TTLSeconds int `json:"ttl_s,omitempty"`
}

// PortURL is the answer of POST /v1/sandboxes/{id}/ports/{port}: a signed
// URL that reaches the sandbox's port without the API key, for a browser,
// until it expires.
type PortURL struct {
	// Port is the sandbox's port.
	Port int `json:"port"`
	// Path is the port's route with the token, relative to the server:
	// /v1/sandboxes/{id}/ports/{port}/?airlock_token=T (a browser that
	// opens it keeps the token in a cookie for that path).
	Path string `json:"path"`
	// HostURL, when the server has a wildcard domain, is
	// http(s)://{port}-{id}.{domain}/?airlock_token=T; empty otherwise.
	HostURL string `json:"host_url,omitempty"`
	// Token is the credential for the port until ExpiresAt (any number of
	// requests): keep it out of logs.
	Token string `json:"token"`
	// ExpiresAt is when the token stops working.
	ExpiresAt time.Time `json:"expires_at"`
}
