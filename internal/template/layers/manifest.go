package layers

import (
	"encoding/hex"
	"fmt"
	"math"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cmdpolicy"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// MaxLayers is the most layers one template may stack: what a sandbox's
// root filesystem can take (see runtime.MaxLayers).
const MaxLayers = runtime.MaxLayers

// namePattern is the syntax of the names the store keeps templates under:
// a template name, optionally after its owner and "~" (a tenant's
// template; see template.StoreName). It must equal
// template.StoreNamePattern (the template package checks this in a test).
// A name is used as a file name, so it can hold no "/" and cannot start
// with ".".
var namePattern = regexp.MustCompile(`^(?:[A-Za-z0-9][A-Za-z0-9_.-]{0,63}~)?[a-z0-9][a-z0-9._-]{0,62}$`)

// NamePattern is the syntax of template names in the store.
func NamePattern() string { return namePattern.String() }

// Manifest describes one stored template: the layers that make up its
// root filesystem and the defaults its sandboxes start with. It is saved
// as templates/<name>.json under the store root.
type Manifest struct {
	// Name is the template name (see NamePattern).
	Name string `json:"name"`
	// Layers are the diff IDs ("sha256:<hex>", the digest of the
	// uncompressed layer tar) of the template's layers, lowest first.
	Layers []string `json:"layers"`
	// Config holds the image defaults.
	Config Config `json:"config"`
	// Created is when the template was stored.
	Created time.Time `json:"created"`
	// Source says where the template came from, for display only
	// (an image reference with its digest, "docker-archive", ...).
	Source string `json:"source,omitempty"`
	// Size is the total size of the template's layers in bytes, filled
	// in by the store.
	Size int64 `json:"size"`
}

// Config is the subset of an OCI image configuration a sandbox uses.
type Config struct {
	Env        []string `json:"env,omitempty"`     // KEY=value
	Workdir    string   `json:"workdir,omitempty"` // absolute, clean
	User       string   `json:"user,omitempty"`    // user[:group], names or ids
	Cmd        []string `json:"cmd,omitempty"`
	Entrypoint []string `json:"entrypoint,omitempty"`
	// Limits are the template's default resource limits: a sandbox
	// request's unset fields take them before the daemon's defaults.
	// Zero fields are unset.
	Limits runtime.Limits `json:"limits,omitzero"`
	// Network is the template's default network policy: a sandbox
	// request without a network takes it. Nil when it has none.
	Network *Network `json:"network,omitempty"`
	// Toolsets name the toolsets a sandbox request that grants no tools
	// and no toolsets is granted, resolved for the creating tenant at
	// each create (a toolset is one tenant's, and a template may be
	// shared); a request that names any replaces them whole. At most
	// MaxToolsets; the API checks each is a toolset name
	// (gateway.ValidName) at build time.
	Toolsets []string `json:"toolsets,omitempty"`
	// CommandPolicy is the template's default command policy for exec
	// (see package cmdpolicy): a sandbox request without one takes it,
	// one with a policy replaces it whole. Nil when it has none.
	CommandPolicy *cmdpolicy.Policy `json:"command_policy,omitempty"`
}

// MaxToolsets caps the default toolsets of a template (Config.Toolsets).
const MaxToolsets = 64

// maxToolsetName caps the bytes of a default toolset's name.
const maxToolsetName = 64

// ClonePolicy returns a copy of p that shares nothing with it (nil for
// nil).
func ClonePolicy(p *cmdpolicy.Policy) *cmdpolicy.Policy {
	if p == nil {
		return nil
	}
	out := &cmdpolicy.Policy{Default: p.Default, Rules: make([]cmdpolicy.Rule, len(p.Rules))}
	for i, r := range p.Rules {
		out.Rules[i] = cmdpolicy.Rule{Action: r.Action, Prefix: slices.Clone(r.Prefix)}
	}
	return out
}

// Network is a template's default network policy, in the sandbox
// manager's terms (sandbox.Network, which validates it at build time and
// again at each create: NetworkOfTemplate). It never names credentials:
// they name one tenant's secrets, and a template may be shared.
type Network struct {
	Mode  string   `json:"mode"`
	Allow []string `json:"allow,omitempty"`
	// MaxConns, BandwidthBytesPerSec and IdleTimeout are the network's
	// limits (sandbox.NetworkLimits); zero fields are unset.
	MaxConns             int           `json:"max_conns,omitempty"`
	BandwidthBytesPerSec int64         `json:"bandwidth_bytes_per_sec,omitempty"`
	IdleTimeout          time.Duration `json:"idle_timeout,omitempty"`
}

// EnvMap returns Env as a map; a later duplicate key wins, as in Docker.
func (c Config) EnvMap() map[string]string {
	env := make(map[string]string, len(c.Env))
	for _, kv := range c.Env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	return env
}

// Limits of a Config, generous for real images and small enough to keep a
// hostile image config from bloating the store.
const (
	maxConfigStrings = 4096
	maxConfigBytes   = 1 << 20
	maxSourceLen     = 1024
	maxUserLen       = 256
	// maxNetworkEntries caps a default network's allowlist (as
	// egress.MaxEntries does a sandbox's).
	maxNetworkEntries = 1024
)

// ValidateName reports whether name is a valid template name.
func ValidateName(name string) error {
	if !namePattern.MatchString(name) {
		return fmt.Errorf("template name %q: must match %s: %w", quoteName(name), namePattern, errdefs.ErrInvalidArgument)
	}
	return nil
}

// ParseDiffID checks that d is "sha256:" followed by 64 lowercase hex
// digits and returns the hex part.
func ParseDiffID(d string) (string, error) {
	hexPart, ok := strings.CutPrefix(d, "sha256:")
	if !ok || len(hexPart) != 64 || strings.ToLower(hexPart) != hexPart {
		return "", fmt.Errorf("layer digest %q: want sha256:<64 lowercase hex digits>: %w", quoteName(d), errdefs.ErrInvalidArgument)
	}
	if _, err := hex.DecodeString(hexPart); err != nil {
		return "", fmt.Errorf("layer digest %q: not hex: %w", quoteName(d), errdefs.ErrInvalidArgument)
	}
	return hexPart, nil
}

// Validate checks every field of m. It does not check that the layers
// exist; the store does that when it saves m.
func (m *Manifest) Validate() error {
	if err := ValidateName(m.Name); err != nil {
		return err
	}
	if len(m.Layers) == 0 {
		return fmt.Errorf("template %q has no layers: %w", m.Name, errdefs.ErrInvalidArgument)
	}
	if len(m.Layers) > MaxLayers {
		return fmt.Errorf("template %q has %d layers, at most %d are supported: %w", m.Name, len(m.Layers), MaxLayers, errdefs.ErrInvalidArgument)
	}
	for _, l := range m.Layers {
		if _, err := ParseDiffID(l); err != nil {
			return fmt.Errorf("template %q: %w", m.Name, err)
		}
	}
	if len(m.Source) > maxSourceLen || !printable(m.Source) {
		return fmt.Errorf("template %q: source must be printable and at most %d bytes: %w", m.Name, maxSourceLen, errdefs.ErrInvalidArgument)
	}
	if err := m.Config.Validate(); err != nil {
		return fmt.Errorf("template %q: %w", m.Name, err)
	}
	return nil
}

// Validate checks c: environment entries are KEY=value with a non-empty
// key, the working directory is absolute and clean, no string holds a NUL
// byte, and the whole config stays within size limits.
func (c *Config) Validate() error {
	total := len(c.Workdir) + len(c.User)
	n := len(c.Env) + len(c.Cmd) + len(c.Entrypoint)
	if n > maxConfigStrings {
		return fmt.Errorf("image config has %d strings, at most %d allowed: %w", n, maxConfigStrings, errdefs.ErrInvalidArgument)
	}
	for _, e := range c.Env {
		k, _, ok := strings.Cut(e, "=")
		if !ok || k == "" || strings.IndexByte(e, 0) >= 0 {
			return fmt.Errorf("image config: environment entry %q is not KEY=value: %w", quoteName(e), errdefs.ErrInvalidArgument)
		}
		total += len(e)
	}
	for _, list := range [][]string{c.Cmd, c.Entrypoint} {
		for _, a := range list {
			if strings.IndexByte(a, 0) >= 0 {
				return fmt.Errorf("image config: command contains a NUL byte: %w", errdefs.ErrInvalidArgument)
			}
			total += len(a)
		}
	}
	if n := c.Network; n != nil {
		if len(n.Allow) > maxNetworkEntries {
			return fmt.Errorf("template network: %d allow entries, at most %d: %w", len(n.Allow), maxNetworkEntries, errdefs.ErrInvalidArgument)
		}
		total += len(n.Mode)
		for _, a := range n.Allow {
			if !printable(a) {
				return fmt.Errorf("template network: allow entry %q has control characters: %w", quoteName(a), errdefs.ErrInvalidArgument)
			}
			total += len(a)
		}
		if !printable(n.Mode) || n.MaxConns < 0 || n.BandwidthBytesPerSec < 0 || n.IdleTimeout < 0 {
			return fmt.Errorf("template network: mode must be printable and limits not negative: %w", errdefs.ErrInvalidArgument)
		}
	}
	if len(c.Toolsets) > MaxToolsets {
		return fmt.Errorf("template toolsets: %d names, at most %d: %w", len(c.Toolsets), MaxToolsets, errdefs.ErrInvalidArgument)
	}
	for i, ts := range c.Toolsets {
		if ts == "" || len(ts) > maxToolsetName || !printable(ts) || strings.ContainsAny(ts, " \t") {
			return fmt.Errorf("template toolsets[%d] %q: want 1 to %d printable bytes without spaces: %w", i, quoteName(ts), maxToolsetName, errdefs.ErrInvalidArgument)
		}
		if slices.Contains(c.Toolsets[:i], ts) {
			return fmt.Errorf("template toolsets: %q is named twice: %w", ts, errdefs.ErrInvalidArgument)
		}
		total += len(ts)
	}
	if p := c.CommandPolicy; p != nil {
		if err := p.Validate(); err != nil {
			return fmt.Errorf("template %w", err)
		}
		total += len(p.Default)
		for _, r := range p.Rules {
			total += len(r.Action)
			for _, w := range r.Prefix {
				total += len(w)
			}
		}
	}
	if total > maxConfigBytes {
		return fmt.Errorf("image config is larger than %d bytes: %w", maxConfigBytes, errdefs.ErrInvalidArgument)
	}
	if c.Workdir != "" && (!path.IsAbs(c.Workdir) || path.Clean(c.Workdir) != c.Workdir || strings.IndexByte(c.Workdir, 0) >= 0 || len(c.Workdir) > 4096) {
		return fmt.Errorf("image config: working directory %q must be an absolute clean path: %w", quoteName(c.Workdir), errdefs.ErrInvalidArgument)
	}
	if len(c.User) > maxUserLen || !printable(c.User) || strings.ContainsAny(c.User, " \t") {
		return fmt.Errorf("image config: user %q is not a valid user[:group]: %w", quoteName(c.User), errdefs.ErrInvalidArgument)
	}
	if l := c.Limits; l.CPUs < 0 || math.IsNaN(l.CPUs) || math.IsInf(l.CPUs, 0) || l.MemoryBytes < 0 || l.Pids < 0 || l.DiskBytes < 0 {
		return fmt.Errorf("template limits must not be negative: %w", errdefs.ErrInvalidArgument)
	}
	return nil
}

// printable reports whether s has no control characters.
func printable(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}
