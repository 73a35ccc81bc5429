package api

import "time"

// Template is a template in a list: a root filesystem sandboxes can be
// created from.
type Template struct {
	Name string `json:"name"`
	// Source says where a stored template came from, its provenance;
	// "built-in" for the daemon's own templates (host).
	Source string `json:"source"`
	// Builtin is true for the daemon's own templates, which are not
	// stored and cannot be removed.
	Builtin bool `json:"builtin"`
	// Shared is true for a template every tenant sees (built-in ones and
	// the operator's), false for one of the caller's tenant.
	Shared bool `json:"shared"`
	// Layers counts the distinct layers; Size is their total size and
	// SharedBytes the part of it in layers other templates the caller
	// sees use too.
	Layers      int   `json:"layers"`
	Size        int64 `json:"size"`
	SharedBytes int64 `json:"shared_bytes"`
	// Created is null for built-in templates.
	Created *time.Time `json:"created"`
}

// TemplateDetail is one template, with its layers and configuration: the
// body of GET /v1/templates/{name} and of a finished build or import.
type TemplateDetail struct {
	Template
	// LayerList are the layers, lowest first.
	LayerList []TemplateLayer `json:"layer_list"`
	// Config holds the defaults of the template's sandboxes.
	Config TemplateConfig `json:"config"`
}

// TemplateLayer is one layer of a template.
type TemplateLayer struct {
	// Digest is the layer's diff ID, "sha256:<hex>".
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
	// Files counts its tar entries.
	Files int64 `json:"files"`
	// Shared is true when another template the caller sees uses the
	// layer too.
	Shared bool `json:"shared"`
}

// TemplateConfig holds the defaults a template's sandboxes start with.
type TemplateConfig struct {
	Env        []string `json:"env"` // KEY=value
	Workdir    string   `json:"workdir"`
	User       string   `json:"user"`
	Cmd        []string `json:"cmd"`
	Entrypoint []string `json:"entrypoint"`
	// Limits are the template's default limits (nil when it sets none):
	// a sandbox's unset limits take them before the server's defaults.
	Limits *Limits `json:"limits,omitempty"`
	// Network is the template's default network policy (nil when it has
	// none): a sandbox created without a network gets it.
	Network *Network `json:"network,omitempty"`
	// Toolsets are the template's default toolsets (absent when it has
	// none): a sandbox created without tools and toolsets is granted
	// them, resolved for the creating tenant.
	Toolsets []string `json:"toolsets,omitempty"`
	// CommandPolicy is the template's default command policy (nil when
	// it has none): a sandbox created without one gets it.
	CommandPolicy *CommandPolicy `json:"command_policy,omitempty"`
}

// TemplateUsage is the disk use of a server's template store; each layer
// counts once however many templates and sandboxes use it.
type TemplateUsage struct {
	Layers       int   `json:"layers"`
	Bytes        int64 `json:"bytes"`
	SharedLayers int   `json:"shared_layers"`
	SharedBytes  int64 `json:"shared_bytes"`
	UnusedLayers int   `json:"unused_layers"`
	UnusedBytes  int64 `json:"unused_bytes"`
}

// TemplateList is the body of GET /v1/templates.
type TemplateList struct {
	Templates []Template    `json:"templates"`
	Usage     TemplateUsage `json:"usage"`
}

// TemplateDeleted is the body of DELETE /v1/templates/{name}: what
// removing the template deleted from disk.
type TemplateDeleted struct {
	Name        string `json:"name"`
	FreedLayers int    `json:"freed_layers"`
	FreedBytes  int64  `json:"freed_bytes"`
}

// RegistryAuth holds credentials for an image registry: a username and
// password, or a bearer token. They are used for the pull only: never
// stored, logged or audited.
type RegistryAuth struct {
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
	Token    string `json:"token,omitempty"`
}

// DebianBase is a Debian root filesystem built from Suite with Packages.
type DebianBase struct {
	Suite    string   `json:"suite"`
	Packages []string `json:"packages,omitempty"`
}

// BuildTemplateRequest is the JSON body of POST /v1/templates: a
// template to build without a build context. Give From (an image
// reference, or "template:NAME") or Debian, with optional Airfile steps
// (RUN, ENV, WORKDIR, USER), or an Airfile with its own FROM or DEBIAN
// line.
type BuildTemplateRequest struct {
	Name string `json:"name"`
	// Shared builds a template every tenant sees (only the operator may);
	// without it the template is the caller's tenant's.
	Shared  bool        `json:"shared,omitempty"`
	From    string      `json:"from,omitempty"`
	Debian  *DebianBase `json:"debian,omitempty"`
	Airfile string      `json:"airfile,omitempty"`
	// Replace allows replacing a stored template of the same name
	// (without it, an existing name is 409 already_exists).
	Replace bool `json:"replace,omitempty"`
	// AllowSetuid keeps set-user-ID and set-group-ID bits on files
	// (default: stripped; they have no effect in sandboxes).
	AllowSetuid bool `json:"allow_setuid,omitempty"`
	// NoCache rebuilds every step instead of reusing cached layers.
	NoCache bool `json:"no_cache,omitempty"`
	// Insecure allows a plain-HTTP registry. Pulling an image from a
	// registry (From an image reference, or an Airfile's FROM IMAGE) is
	// the operator's: other keys get 403 and build from "template:NAME"
	// or Debian.
	Insecure     bool          `json:"insecure,omitempty"`
	RegistryAuth *RegistryAuth `json:"registry_auth,omitempty"`
	// Limits are the template's default limits; unset fields keep a
	// FROM template's.
	Limits *Limits `json:"limits,omitempty"`
	// Network is the template's default network policy, validated as a
	// sandbox's: a sandbox created without a network gets it, and one
	// with a network replaces it whole. It may not name credentials
	// (they name one tenant's secrets; give them at create). Absent
	// keeps a FROM template's.
	Network *Network `json:"network,omitempty"`
	// Toolsets name the template's default toolsets (at most 64): a
	// sandbox created without tools and toolsets is granted them,
	// resolved for the creating tenant at each create (a toolset the
	// tenant does not have is then 404 not_found naming it and the
	// template), and one that names tools or toolsets replaces them
	// whole. Absent keeps a FROM template's.
	Toolsets []string `json:"toolsets,omitempty"`
	// CommandPolicy is the template's default command policy for exec:
	// a sandbox created without a command_policy gets it, and one with
	// a policy replaces it whole. Absent keeps a FROM template's.
	CommandPolicy *CommandPolicy `json:"command_policy,omitempty"`
}

// The types of the lines of a build stream (BuildStreamLine.Type).
const (
	BuildWarning  = "warning"  // a note before the steps (Text): an Airfile instruction that is ignored
	BuildStep     = "step"     // a step starts
	BuildCached   = "cached"   // a step's layer comes from the cache
	BuildLog      = "log"      // a line of a step's output
	BuildProgress = "progress" // bytes of a layer being pulled or stored
	BuildDone     = "done"     // the last line, with the template
	BuildError    = "error"    // the last line when the build failed, with the error
)

// BuildStreamLine is one line of a streamed build or import. Fields that
// are zero are left out.
type BuildStreamLine struct {
	// Type is one of the Build constants.
	Type string `json:"type"`
	// Step is the 1-based step of Steps; Instruction is its text (step,
	// cached).
	Step        int    `json:"step,omitempty"`
	Steps       int    `json:"steps,omitempty"`
	Instruction string `json:"instruction,omitempty"`
	// Text is a line of output (log) or the warning (warning).
	Text string `json:"text,omitempty"`
	// Layer of Layers, with Done of Total bytes (progress; Total is 0
	// when unknown).
	Layer  int   `json:"layer,omitempty"`
	Layers int   `json:"layers,omitempty"`
	Done   int64 `json:"done,omitempty"`
	Total  int64 `json:"total,omitempty"`
	// Template is the template built (done).
	Template *TemplateDetail `json:"template,omitempty"`
	// Error is why the build failed (error).
	Error *ErrorDetail `json:"error,omitempty"`
}
