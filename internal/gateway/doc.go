// Package gateway is the tool gateway: the one way code in a sandbox
// calls a tool. A tool is registered by a tenant (Tool: a name, a
// description, JSON Schemas of its input and output, an upstream that
// runs it, and its governance settings) and granted to sandboxes through
// toolsets. Every call goes through Gateway.Call, which decides, in
// order: the tool is granted to the calling sandbox; its arguments match
// its input schema; the tenant's Cedar policy permits it; its budgets
// (rate, count per sandbox, calls in flight) hold; a human approves it
// where the tool requires approval; its upstream's circuit breaker is
// closed. Then it calls the upstream with the tenant's secrets added
// (never shown to the sandbox), validates and caps the output, and
// records the call (Record) whatever the outcome.
//
// The sandbox is identified by the channel the call came on (Caller is
// built by the daemon, never read from the call), so a sandbox holds no
// token and no secret.
package gateway
