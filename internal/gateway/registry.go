package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// StoreRegistry is the Registry of the daemon: tenants' tools and
// toolsets kept in a store.ToolStore, each as its JSON. It validates
// what it is given (Tool.Validate, Toolset.Validate) and owns the
// fields a caller does not set: Owner (the tenant), CreatedAt and
// UpdatedAt. It is safe for concurrent use.
type StoreRegistry struct {
	st  store.ToolStore
	now func() time.Time
	pin Pinner
}

// Pinner returns what the upstream MCP server of t (a tool of tenant)
// says of its tool now; Gateway.PinMCP is one.
type Pinner func(ctx context.Context, tenant string, t Tool) (*MCPPin, error)

// SetPinner sets how the registry pins the upstream tool of an MCP tool
// when it is registered or replaced (MCPUpstream.Pinned), before the
// registry is used. Without one, MCP tools are refused: an unpinned
// tool could not be checked at its calls.
func (g *StoreRegistry) SetPinner(p Pinner) { g.pin = p }

var _ Registry = (*StoreRegistry)(nil)

// NewRegistry returns the registry kept in st.
func NewRegistry(st store.ToolStore) *StoreRegistry {
	return &StoreRegistry{st: st, now: time.Now}
}

// toolRecord is v, a tool or a toolset, as the store keeps it: its JSON,
// without HTML escaping (which would make a template of '<' six times
// its size).
func toolRecord(tenant, name string, v any, at time.Time) (store.ToolRecord, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return store.ToolRecord{}, fmt.Errorf("encode %s: %v: %w", name, err, errdefs.ErrInternal)
	}
	doc := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	return store.ToolRecord{TenantID: tenant, Name: name, Doc: doc, CreatedAt: at, UpdatedAt: at}, nil
}

// toolOf decodes a stored tool; the record's columns, not the document,
// say whose it is and when it was written.
func toolOf(r store.ToolRecord) (Tool, error) {
	var t Tool
	if err := json.Unmarshal(r.Doc, &t); err != nil {
		return Tool{}, fmt.Errorf("stored tool %s: %v: %w", r.Name, err, errdefs.ErrInternal)
	}
	t.Owner, t.Name, t.CreatedAt, t.UpdatedAt = r.TenantID, r.Name, r.CreatedAt, r.UpdatedAt
	return t, nil
}

// toolsetOf decodes a stored toolset like toolOf.
func toolsetOf(r store.ToolRecord) (Toolset, error) {
	var s Toolset
	if err := json.Unmarshal(r.Doc, &s); err != nil {
		return Toolset{}, fmt.Errorf("stored toolset %s: %v: %w", r.Name, err, errdefs.ErrInternal)
	}
	s.Owner, s.Name, s.CreatedAt, s.UpdatedAt = r.TenantID, r.Name, r.CreatedAt, r.UpdatedAt
	if s.Tools == nil {
		s.Tools = []string{}
	}
	return s, nil
}

// Tool implements Registry.
func (g *StoreRegistry) Tool(ctx context.Context, tenant, name string) (Tool, error) {
	r, err := g.st.GetTool(ctx, tenant, name)
	if err != nil {
		return Tool{}, err
	}
	return toolOf(r)
}

// Toolset implements Registry.
func (g *StoreRegistry) Toolset(ctx context.Context, tenant, name string) (Toolset, error) {
	r, err := g.st.GetToolset(ctx, tenant, name)
	if err != nil {
		return Toolset{}, err
	}
	return toolsetOf(r)
}

// prepareTool validates t, pins its upstream MCP tool (if it has one)
// and returns the record to store for tenant. A pin the caller gave is
// replaced: only the upstream says what it is.
func (g *StoreRegistry) prepareTool(ctx context.Context, tenant string, t Tool) (store.ToolRecord, Tool, error) {
	if err := t.Validate(); err != nil {
		return store.ToolRecord{}, Tool{}, err
	}
	if t.Upstream.Kind == UpstreamMCP {
		if g.pin == nil {
			return store.ToolRecord{}, Tool{}, fmt.Errorf("upstream.kind %q: this server does not reach MCP upstreams: %w", UpstreamMCP, errdefs.ErrNotSupported)
		}
		m := *t.Upstream.MCP
		m.Pinned = nil
		t.Upstream.MCP = &m
		pin, err := g.pin(ctx, tenant, t)
		if err != nil {
			return store.ToolRecord{}, Tool{}, err
		}
		m.Pinned = pin
	}
	now := g.now().UTC()
	t.Owner, t.CreatedAt, t.UpdatedAt = tenant, now, now
	r, err := toolRecord(tenant, t.Name, t, now)
	return r, t, err
}

// CreateTool registers t as tenant's: ErrInvalidArgument naming the
// field for a tool Validate refuses, ErrAlreadyExists if the tenant has
// a tool of that name, ErrResourceExhausted at the store's cap. It
// returns the tool as stored.
func (g *StoreRegistry) CreateTool(ctx context.Context, tenant string, t Tool) (Tool, error) {
	r, t, err := g.prepareTool(ctx, tenant, t)
	if err != nil {
		return Tool{}, err
	}
	if err := g.st.CreateTool(ctx, r); err != nil {
		return Tool{}, err
	}
	return t, nil
}

// ReplaceTool replaces tenant's tool t.Name with t (ErrNotFound if there
// is none), keeping its creation time, and returns it as stored.
func (g *StoreRegistry) ReplaceTool(ctx context.Context, tenant string, t Tool) (Tool, error) {
	r, _, err := g.prepareTool(ctx, tenant, t)
	if err != nil {
		return Tool{}, err
	}
	stored, err := g.st.ReplaceTool(ctx, r)
	if err != nil {
		return Tool{}, err
	}
	return toolOf(stored)
}

// ListTools returns tenant's tools, ordered by name.
func (g *StoreRegistry) ListTools(ctx context.Context, tenant string) ([]Tool, error) {
	rs, err := g.st.ListTools(ctx, tenant)
	if err != nil {
		return nil, err
	}
	out := make([]Tool, 0, len(rs))
	for _, r := range rs {
		t, err := toolOf(r)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// DeleteTool removes tenant's tool name; ErrNotFound if there is none.
// Toolsets that list it keep its name, and Resolve then refuses them
// until the tool is registered again or the toolset changed.
func (g *StoreRegistry) DeleteTool(ctx context.Context, tenant, name string) error {
	return g.st.DeleteTool(ctx, tenant, name)
}

// prepareToolset validates s, checks that each of its tools is
// registered, and returns the record to store for tenant.
func (g *StoreRegistry) prepareToolset(ctx context.Context, tenant string, s Toolset) (store.ToolRecord, Toolset, error) {
	if err := s.Validate(); err != nil {
		return store.ToolRecord{}, Toolset{}, err
	}
	for i, name := range s.Tools {
		if _, err := g.st.GetTool(ctx, tenant, name); err != nil {
			if errors.Is(err, errdefs.ErrNotFound) {
				return store.ToolRecord{}, Toolset{}, fmt.Errorf("tools[%d]: tool %s is not registered: %w", i, name, errdefs.ErrInvalidArgument)
			}
			return store.ToolRecord{}, Toolset{}, err
		}
	}
	if s.Tools == nil {
		s.Tools = []string{}
	}
	now := g.now().UTC()
	s.Owner, s.CreatedAt, s.UpdatedAt = tenant, now, now
	r, err := toolRecord(tenant, s.Name, s, now)
	return r, s, err
}

// CreateToolset registers s as tenant's, like CreateTool; each of its
// tools must be registered (ErrInvalidArgument naming the first that is
// not).
func (g *StoreRegistry) CreateToolset(ctx context.Context, tenant string, s Toolset) (Toolset, error) {
	r, s, err := g.prepareToolset(ctx, tenant, s)
	if err != nil {
		return Toolset{}, err
	}
	if err := g.st.CreateToolset(ctx, r); err != nil {
		return Toolset{}, err
	}
	return s, nil
}

// ReplaceToolset replaces tenant's toolset s.Name, like ReplaceTool.
func (g *StoreRegistry) ReplaceToolset(ctx context.Context, tenant string, s Toolset) (Toolset, error) {
	r, _, err := g.prepareToolset(ctx, tenant, s)
	if err != nil {
		return Toolset{}, err
	}
	stored, err := g.st.ReplaceToolset(ctx, r)
	if err != nil {
		return Toolset{}, err
	}
	return toolsetOf(stored)
}

// ListToolsets returns tenant's toolsets, ordered by name.
func (g *StoreRegistry) ListToolsets(ctx context.Context, tenant string) ([]Toolset, error) {
	rs, err := g.st.ListToolsets(ctx, tenant)
	if err != nil {
		return nil, err
	}
	out := make([]Toolset, 0, len(rs))
	for _, r := range rs {
		s, err := toolsetOf(r)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// DeleteToolset removes tenant's toolset name; ErrNotFound if none.
func (g *StoreRegistry) DeleteToolset(ctx context.Context, tenant, name string) error {
	return g.st.DeleteToolset(ctx, tenant, name)
}

// Resolve returns the names of the tools a sandbox of tenant is granted
// when it asks for tools and toolsets: each named tool, and each tool
// of each named toolset, sorted and without duplicates. Every name must
// be registered: a missing tool or toolset, or a tool a toolset lists
// that is no longer registered, is ErrNotFound naming it. More than
// MaxToolsetTools names asked for, or granted, is ErrInvalidArgument.
func (g *StoreRegistry) Resolve(ctx context.Context, tenant string, tools, toolsets []string) ([]string, error) {
	if len(tools) > MaxToolsetTools || len(toolsets) > MaxToolsetTools {
		return nil, fmt.Errorf("at most %d tools and %d toolsets may be named: %w", MaxToolsetTools, MaxToolsetTools, errdefs.ErrInvalidArgument)
	}
	granted := map[string]bool{}
	for _, name := range tools {
		if granted[name] {
			continue
		}
		if err := ValidName(name); err != nil {
			return nil, fmt.Errorf("tools: tool %w", err)
		}
		if _, err := g.st.GetTool(ctx, tenant, name); err != nil {
			return nil, err
		}
		granted[name] = true
	}
	seen := map[string]bool{}
	for _, name := range toolsets {
		if seen[name] {
			continue
		}
		seen[name] = true
		if err := ValidName(name); err != nil {
			return nil, fmt.Errorf("toolsets: toolset %w", err)
		}
		s, err := g.Toolset(ctx, tenant, name)
		if err != nil {
			return nil, err
		}
		for _, tool := range s.Tools {
			if granted[tool] {
				continue
			}
			if _, err := g.st.GetTool(ctx, tenant, tool); err != nil {
				if errors.Is(err, errdefs.ErrNotFound) {
					return nil, fmt.Errorf("tool %s of toolset %s: %w", tool, name, errdefs.ErrNotFound)
				}
				return nil, err
			}
			granted[tool] = true
			if len(granted) > MaxToolsetTools {
				return nil, fmt.Errorf("the tools and toolsets grant more than %d tools: %w", MaxToolsetTools, errdefs.ErrInvalidArgument)
			}
		}
	}
	out := make([]string, 0, len(granted))
	for name := range granted {
		out = append(out, name)
	}
	slices.Sort(out)
	return out, nil
}
