package api

import "time"

// State is where a sandbox is in its lifecycle.
type State string

// The sandbox states.
const (
	StateCreating State = "creating"
	// StateAdopting: a restarted daemon is adopting the sandbox; its
	// operations wait for the adoption (up to 10 s), then run or fail
	// with 503 (retry).
	StateAdopting State = "adopting"
	StateRunning  State = "running"
	StatePaused   State = "paused"
	StateStopping State = "stopping"
	// StateStopped and StateFailed with stopped_at set: the sandbox has
	// ended (end_reason says why). The server keeps ended sandboxes
	// visible for a while (its ended_retention), then answers not_found.
	StateStopped State = "stopped"
	StateFailed  State = "failed"
)

// The reasons a sandbox ended (Sandbox.EndReason).
const (
	EndDeleted            = "deleted"             // a DELETE of the sandbox
	EndExpired            = "expired"             // its timeout passed
	EndIdle               = "idle"                // its idle timeout passed
	EndAgentDied          = "agent_died"          // its agent (PID 1) exited, and every process with it
	EndAgentUnhealthy     = "agent_unhealthy"     // its agent stopped answering health probes; the server ended it
	EndAgentGone          = "agent_gone"          // its agent was gone when the server restarted
	EndCreateInterrupted  = "create_interrupted"  // the server restarted before its create was answered
	EndDestroyInterrupted = "destroy_interrupted" // the server restarted during its delete, then finished it
)

// Limits are a sandbox's resource caps. Zero fields take the template's
// limits, then the server's defaults.
type Limits struct {
	// CPUs is the CPU time in CPUs (0.5: half of one).
	CPUs float64 `json:"cpus,omitempty"`
	// MemoryMB caps memory, in MiB.
	MemoryMB int64 `json:"memory_mb,omitempty"`
	// Pids caps the processes and threads.
	Pids int64 `json:"pids,omitempty"`
	// DiskMB caps the sandbox's writable disk, in MiB.
	DiskMB int64 `json:"disk_mb,omitempty"`
}

// Network is a sandbox's network policy, in a create request and the
// body of PATCH /v1/sandboxes/{id}/network.
type Network struct {
	// Mode "none" (the default) gives the sandbox loopback only;
	// "allowlist" lets it reach the destinations in Allow through its
	// egress proxy ("open" is not supported yet).
	Mode string `json:"mode"`
	// Allow lists the destinations mode allowlist may reach: host names,
	// "*.example.com" wildcards, IP addresses and CIDRs, each with an
	// optional ":port" or ":port-port" list; loopback, private,
	// link-local and metadata addresses only when listed as addresses.
	// It must be empty with mode none.
	Allow []string `json:"allow,omitempty"`
	// Credentials are headers the egress proxy adds, with a stored
	// secret of the caller's tenant, to the requests to one allowed
	// host, so that code in the sandbox uses an API without holding its
	// key. Mode allowlist only.
	Credentials []NetworkCredential `json:"credentials,omitempty"`
	// Limits bound the sandbox's egress proxy below the server's own
	// limits. Mode allowlist only.
	Limits *NetworkLimits `json:"limits,omitempty"`
}

// NetworkLimits bound a sandbox's egress proxy (mode allowlist). In a
// request each zero or absent field takes the server's value, which is
// also its ceiling: a value above it is 400 invalid_argument. In a
// NetworkView they are the limits in force.
type NetworkLimits struct {
	// MaxConnections caps the connections open through the proxy at
	// once; one more is refused (reason conn_limit).
	MaxConnections int `json:"max_connections,omitempty"`
	// BandwidthBytesPerS caps the proxy's throughput in each direction,
	// in bytes a second, all its connections together (absent in a
	// NetworkView: no cap).
	BandwidthBytesPerS int64 `json:"bandwidth_bytes_per_s,omitempty"`
	// IdleTimeoutS ends a connection on which nothing moved for this
	// many seconds.
	IdleTimeoutS int64 `json:"idle_timeout_s,omitempty"`
}

// NetworkCredential is one credential added at the egress edge: the
// header Header, set to Format with "{secret}" replaced by the value of
// the secret Secret, on every HTTP/1.1 request to Host (on Port, or any
// allowed port when 0), replacing a header of that name the sandbox sent.
// Over HTTPS the proxy terminates the sandbox's TLS with the daemon's
// egress CA, which the sandbox trusts, and verifies the real host's
// certificate.
type NetworkCredential struct {
	Host   string `json:"host"`
	Port   uint16 `json:"port,omitempty"`
	Header string `json:"header"`
	Secret string `json:"secret"`
	Format string `json:"format,omitempty"`
}

// CreateSandboxRequest is the body of POST /v1/sandboxes. Zero values
// mean the server's defaults.
type CreateSandboxRequest struct {
	// Template names the root filesystem ("host" by default).
	Template string `json:"template,omitempty"`
	// TimeoutS is how long the sandbox lives, in seconds.
	TimeoutS int64 `json:"timeout_s,omitempty"`
	// IdleTimeoutS destroys the sandbox after this many seconds without
	// activity.
	IdleTimeoutS int64 `json:"idle_timeout_s,omitempty"`
	// Limits are the sandbox's resource caps.
	Limits *Limits `json:"limits,omitempty"`
	// Network is its network policy.
	Network *Network `json:"network,omitempty"`
	// Env is added to every command's environment.
	Env map[string]string `json:"env,omitempty"`
	// Metadata are labels returned with the sandbox and usable as list
	// filters.
	Metadata map[string]string `json:"metadata,omitempty"`
	// Tools and Toolsets name the caller's tools, and toolsets of them,
	// granted to the sandbox: its code calls them through the tool
	// gateway at AIRLOCK_TOOLS_URL. An unknown name is 404 not_found.
	Tools    []string `json:"tools,omitempty"`
	Toolsets []string `json:"toolsets,omitempty"`
	// CommandPolicy, if set, judges every command exec runs in the
	// sandbox before it runs (see CommandPolicy).
	CommandPolicy *CommandPolicy `json:"command_policy,omitempty"`
}

// CommandPolicy is a sandbox's allow/ask/deny policy over the commands
// exec runs. The command line (or argument list) is parsed as shell
// syntax and each simple command in it (of pipelines, lists,
// substitutions, bash -c strings, wrappers such as env, sudo, timeout,
// xargs) is judged; the exec gets the most restrictive action (deny >
// ask > allow). What cannot be resolved statically (a command from a
// variable) fails closed. deny is 403 permission_denied; ask waits for
// a decision at /v1/approvals, or is denied where the daemon has no
// approval queue. It is a guard-rail, not a boundary: a program can
// always write a script and run it; the sandbox is the boundary.
type CommandPolicy struct {
	// Rules give an action to the commands their prefix matches; a
	// command several match gets the most restrictive.
	Rules []CommandRule `json:"rules,omitempty"`
	// Default is the action of a command no rule matches: "allow"
	// (when empty), "ask" or "deny".
	Default string `json:"default,omitempty"`
}

// CommandRule gives Action ("allow", "ask" or "deny") to every command
// whose words begin with Prefix; the first word is compared by its base
// name (git matches /usr/bin/git) and "*" matches any one word.
type CommandRule struct {
	Action string   `json:"action"`
	Prefix []string `json:"prefix"`
}

// TimeoutRequest is the body of POST /v1/sandboxes/{id}/timeout.
type TimeoutRequest struct {
	// TimeoutS is how many seconds from now the sandbox should live.
	TimeoutS int64 `json:"timeout_s"`
}

// Sandbox describes a sandbox. Its env is never returned: it may hold
// secrets the creator passed in.
type Sandbox struct {
	// ID names the sandbox ("sb-" and 16 characters).
	ID string `json:"id"`
	// State is where it is in its lifecycle.
	State State `json:"state"`
	// Template names its root filesystem.
	Template string `json:"template"`
	// Limits are its effective resource caps.
	Limits Limits `json:"limits"`
	// Metadata are its labels ({} when none).
	Metadata map[string]string `json:"metadata"`
	// Tools are the names of the tools granted to it (its tools and its
	// toolsets' at create), sorted; absent when none.
	Tools []string `json:"tools,omitempty"`
	// CommandPolicy is its command policy; absent when it has none.
	CommandPolicy *CommandPolicy `json:"command_policy,omitempty"`
	// CreatedAt is when it was created.
	CreatedAt time.Time `json:"created_at"`
	// ExpiresAt is when its timeout ends it.
	ExpiresAt time.Time `json:"expires_at"`
	// MaxExpiresAt is the latest expiry a timeout can set.
	MaxExpiresAt time.Time `json:"max_expires_at"`
	// IdleTimeoutS is its idle timeout in seconds; absent when it has
	// none.
	IdleTimeoutS int64 `json:"idle_timeout_s,omitempty"`
	// LastActivityAt is when it was last used.
	LastActivityAt time.Time `json:"last_activity_at"`
	// StoppedAt is when the sandbox ended (stopped, or failed with its
	// agent dead: its resources are released); absent while it lives.
	StoppedAt *time.Time `json:"stopped_at,omitempty"`
	// EndReason says why the sandbox ended or is ending (one of the End*
	// constants); absent while it lives.
	EndReason string `json:"end_reason,omitempty"`
	// Error says why a failed sandbox failed.
	Error string `json:"error,omitempty"`
	// Health is what the server's probes of its agent found; absent
	// before the first probe.
	Health *Health `json:"health,omitempty"`
}

// The health statuses (Health.Status).
const (
	HealthHealthy   = "healthy"
	HealthUnhealthy = "unhealthy"
)

// Health is what the server's health probes found of a sandbox's agent.
// A sandbox is unhealthy from its first missed probe, healthy again at
// the next answered one, and ended (end_reason agent_unhealthy) after
// the server's limit of probes missed in a row.
type Health struct {
	// Status is HealthHealthy or HealthUnhealthy.
	Status string `json:"status"`
	// Missed counts the probes missed in a row.
	Missed int `json:"missed"`
	// CheckedAt is when the last probe ended; Since when Status last
	// changed.
	CheckedAt time.Time `json:"checked_at"`
	Since     time.Time `json:"since"`
	// Error says how the last missed probe failed; absent while healthy.
	Error string `json:"error,omitempty"`
}

// SandboxList is the body of GET /v1/sandboxes.
type SandboxList struct {
	// Sandboxes are the caller's sandboxes the filters select, oldest
	// first.
	Sandboxes []Sandbox `json:"sandboxes"`
}
