// Package mcp serves Airlock to MCP clients (the Model Context Protocol):
// sandboxes as tools — create, run commands and code, read, write and
// edit files, run programs that call the tool gateway — over Streamable
// HTTP at /mcp (bearer API key, with the OAuth protected-resource
// metadata HTTP servers publish) and over stdio (airlock mcp), with the
// official Go SDK (github.com/modelcontextprotocol/go-sdk).
//
// Like the E2B edge, it is a translator: every tool call becomes calls
// of Airlock's public API through the Go client with the caller's key,
// so scopes, tenancy, limits, command policy and the audit log are the
// API's. The tools a key is offered follow its scopes (GET /v1/whoami):
// a key without sandboxes:write is not offered destroy_sandbox.
package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/tracing"
)

// Path is where the Streamable HTTP endpoint is served; MetadataPath
// the OAuth protected-resource metadata (RFC 9728) of it.
const (
	Path         = "/mcp"
	MetadataPath = "/.well-known/oauth-protected-resource/mcp"
)

// Defaults of the server.
const (
	// DefaultIdleTimeout is the idle timeout of the sandboxes MCP
	// clients create: an MCP session that goes quiet leaves nothing
	// running for long.
	DefaultIdleTimeout = 15 * time.Minute
	// sessionIdle ends an HTTP session nobody used for this long.
	sessionIdle = 30 * time.Minute
	// maxBody caps one HTTP message.
	maxBody = 4 << 20
)

// Config configures a server.
type Config struct {
	// APIURL is Airlock's API, which every tool call is translated onto.
	APIURL string
	// HTTPClient carries the translated calls (default: one without a
	// timeout: each call bounds its own).
	HTTPClient *http.Client
	// IdleTimeout of the sandboxes clients create (default
	// DefaultIdleTimeout).
	IdleTimeout time.Duration
	// Version is the server version reported to clients.
	Version string
	Log     *slog.Logger
}

func (cfg *Config) fill() error {
	if cfg.APIURL == "" {
		return errors.New("mcp: the API URL is required")
	}
	if cfg.HTTPClient == nil {
		// The calls carry the caller's trace context (see newServer).
		cfg.HTTPClient = &http.Client{Transport: tracing.Transport(&http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second})}
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return nil
}

// caller is who a server speaks for: the key's client and what it may do.
type caller struct {
	c      *client.Client
	who    *client.WhoAmI
	scopes map[string]bool
}

// has reports whether the key has scope s (admin implies every scope
// but operator; operator every scope).
func (k *caller) has(s string) bool {
	return k.scopes[s] || k.scopes["operator"] || s != "operator" && k.scopes["admin"]
}

// newCaller asks the API who key is.
func newCaller(ctx context.Context, cfg *Config, key string) (*caller, error) {
	c, err := client.New(cfg.APIURL, key, client.WithHTTPClient(cfg.HTTPClient))
	if err != nil {
		return nil, err
	}
	who, err := c.WhoAmI(ctx)
	if err != nil {
		return nil, err
	}
	k := &caller{c: c, who: who, scopes: map[string]bool{}}
	for _, s := range who.Scopes {
		k.scopes[s] = true
	}
	return k, nil
}

// newServer returns an MCP server offering key's tools: the sandbox
// tools its scopes allow, and its tenant's gateway tools.
func newServer(ctx context.Context, cfg *Config, k *caller) *sdk.Server {
	s := sdk.NewServer(&sdk.Implementation{Name: "airlock", Title: "Airlock sandboxes", Version: cfg.Version}, &sdk.ServerOptions{
		Instructions: "Airlock runs commands and code in isolated sandboxes. Tools that take sandbox_id use your default sandbox when it is omitted, creating it on first use; it is destroyed after " +
			cfg.IdleTimeout.String() + " without activity.",
		Capabilities: &sdk.ServerCapabilities{Tools: &sdk.ToolCapabilities{}},
		Logger:       cfg.Log,
	})
	// A tool runs on the session's context, not its HTTP request's: the
	// trace context of the request that carried the call is taken from
	// its headers, so that the API calls it makes continue the caller's
	// trace (HTTPClient's transport sends it on).
	s.AddReceivingMiddleware(func(next sdk.MethodHandler) sdk.MethodHandler {
		return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
			if ex := req.GetExtra(); ex != nil && ex.Header != nil {
				ctx = tracing.Extract(ctx, ex.Header)
			}
			return next(ctx, method, req)
		}
	})
	t := &tools{cfg: cfg, k: k}
	t.register(s)
	if err := t.registerGateway(ctx, s); err != nil {
		cfg.Log.Warn("listing the gateway tools for an MCP session failed", "key", k.who.KeyID, "err", err)
	}
	return s
}

// Handler returns the Streamable HTTP handler of /mcp and the
// protected-resource metadata: a bearer API key is required (401 with
// the metadata's URL in WWW-Authenticate without one); each session is
// bound to its key.
func Handler(cfg Config) (http.Handler, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	verify := func(ctx context.Context, token string, r *http.Request) (*auth.TokenInfo, error) {
		k, err := newCaller(ctx, &cfg, token)
		if errors.Is(err, client.ErrUnauthorized) {
			return nil, fmt.Errorf("%w: %v", auth.ErrInvalidToken, err)
		}
		if err != nil {
			return nil, err
		}
		scopes := append([]string(nil), k.who.Scopes...)
		return &auth.TokenInfo{Scopes: scopes, UserID: k.who.TenantID + "/" + k.who.KeyID,
			Extra: map[string]any{"caller": k}}, nil
	}
	stream := sdk.NewStreamableHTTPHandler(func(r *http.Request) *sdk.Server {
		ti := auth.TokenInfoFromContext(r.Context())
		if ti == nil {
			return nil
		}
		k, _ := ti.Extra["caller"].(*caller)
		if k == nil {
			return nil
		}
		return newServer(r.Context(), &cfg, k)
	}, &sdk.StreamableHTTPOptions{SessionTimeout: sessionIdle, MaxRequestBodyBytes: maxBody, Logger: cfg.Log})
	mux := http.NewServeMux()
	mux.Handle(Path, auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{
		ResourceMetadataURL: MetadataPath, AllowMissingExpiration: true,
	})(stream))
	mux.HandleFunc("GET "+MetadataPath, func(w http.ResponseWriter, r *http.Request) {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		meta := oauthex.ProtectedResourceMetadata{
			Resource:               scheme + "://" + r.Host + Path,
			BearerMethodsSupported: []string{"header"},
			ScopesSupported:        []string{"sandboxes:read", "sandboxes:write", "exec", "files", "tools:call", "admin"},
			ResourceName:           "Airlock",
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(meta)
	})
	return bodyDeadline(mux), nil
}

// ServeStdio serves one MCP client on stdin and stdout with key, until
// the client goes or ctx ends.
func ServeStdio(ctx context.Context, cfg Config, key string, t sdk.Transport) error {
	if err := cfg.fill(); err != nil {
		return err
	}
	k, err := newCaller(ctx, &cfg, key)
	if err != nil {
		return fmt.Errorf("the API key was not accepted: %w", err)
	}
	return newServer(ctx, &cfg, k).Run(ctx, t)
}

// textOf is a short, safe text for errors.
func textOf(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
