package egress

import (
	"net/netip"
	"time"
)

// Protocol is how a client asked the proxy for a destination.
type Protocol string

// The protocols the proxy speaks.
const (
	// ProtoConnect is an HTTP CONNECT tunnel.
	ProtoConnect Protocol = "connect"
	// ProtoHTTP is one plain HTTP request forwarded (absolute URI).
	ProtoHTTP Protocol = "http"
	// ProtoSOCKS5 is a SOCKS5 CONNECT tunnel.
	ProtoSOCKS5 Protocol = "socks5"
	// ProtoOpen is a flow, or a refused packet, of a sandbox in the open
	// network mode, which has no proxy: the kernel saw it (see package
	// opennet), and Host is the destination address (no name is seen).
	ProtoOpen Protocol = "open"
	// ProtoDNS is a DNS query the sandbox's agent forwarded to the
	// proxy's DNS endpoint (DNSHost); only refusals are reported.
	ProtoDNS Protocol = "dns"
)

// EndReason says how an allowed connection ended.
type EndReason string

// The ways an allowed connection ends.
const (
	// EndClosed: a side closed (or reset) it, or the HTTP exchange
	// completed.
	EndClosed EndReason = "closed"
	// EndIdle: no byte moved either way for the idle timeout.
	EndIdle EndReason = "idle_timeout"
	// EndShutdown: the proxy stopped (its Serve context ended).
	EndShutdown EndReason = "shutdown"
	// EndError: a read or write failed.
	EndError EndReason = "error"
)

// Event is the evidence of one egress decision: one per tunnel (CONNECT
// or SOCKS5), one per forwarded HTTP request, and one per connection
// refused before it named a destination (over the connection cap, or a
// malformed handshake), and one per DNS query refused (ProtoDNS: Host is
// the name asked for, Detail the query type; a query answered is no
// event, only counted in Stats.DNSQueries, since the connection that
// may follow is one). A refusal is reported when it is decided; an
// allowed destination when its connection (or its HTTP exchange) ends,
// with the bytes moved and the duration. The proxy calls Config.OnEvent
// with it from the connection's goroutine: the callback must return
// quickly (hand the event to a queue) and must not keep the Event's
// address. The daemon adds the sandbox's identity and writes it to the
// audit log; its field names below are its JSON form there.
type Event struct {
	// Start is when the client's request was read (or, for a refusal
	// at the cap, accepted).
	Start time.Time `json:"start"`
	// Protocol is how the destination was asked for.
	Protocol Protocol `json:"protocol,omitempty"`
	// Method is the HTTP method of a forwarded request.
	Method string `json:"method,omitempty"`
	// Host is the destination as the client named it, canonical (lower
	// case name, or an address); empty when none was read.
	Host string `json:"host,omitempty"`
	// Port is the destination port; 0 when none was read.
	Port uint16 `json:"port,omitempty"`
	// Addr is the address connected to, or, for ReasonBlockedAddress,
	// the resolved address that was refused. Invalid (omitted) when
	// there is none.
	Addr netip.Addr `json:"addr,omitzero"`
	// Allowed says whether the connection went ahead.
	Allowed bool `json:"allowed"`
	// Reason is why (ReasonAllowed when allowed).
	Reason Reason `json:"reason"`
	// Class is the guarded class of Addr, if it has one.
	Class AddrClass `json:"class,omitempty"`
	// Rule is the policy entry that allowed the destination.
	Rule string `json:"rule,omitempty"`
	// Credential names the secrets whose values the proxy added to the
	// requests (comma-separated), never a value.
	Credential string `json:"credential,omitempty"`
	// Detail is more about a refusal for the operator: the TLS server
	// name or HTTP Host seen on a mismatch, a dial error. It may name
	// host addresses; it is never shown to the sandbox.
	Detail string `json:"detail,omitempty"`
	// BytesUp counts bytes from the sandbox to the destination, BytesDown
	// bytes from the destination to the sandbox (payload after the
	// proxy's handshake; for HTTP, the request and response as written).
	BytesUp   int64 `json:"bytes_up"`
	BytesDown int64 `json:"bytes_down"`
	// Duration is from Start to the end of the connection.
	Duration time.Duration `json:"duration_ns"`
	// End is how an allowed connection ended; empty for a refusal.
	End EndReason `json:"end,omitempty"`
}

// Stats is a snapshot of a proxy's counters since it was made.
type Stats struct {
	// Conns counts client connections accepted, those refused at the
	// connection cap included; Active is how many are open now.
	Conns  int64 `json:"conns"`
	Active int64 `json:"active"`
	// Allowed counts destinations allowed (tunnels opened, HTTP requests
	// forwarded); Refused counts refusals of every reason.
	Allowed int64 `json:"allowed"`
	Refused int64 `json:"refused"`
	// BytesUp and BytesDown count payload bytes, as in Event; they grow
	// while connections are open.
	BytesUp   int64 `json:"bytes_up"`
	BytesDown int64 `json:"bytes_down"`
	// DNSQueries counts DNS queries answered (see DNSHost), refused ones
	// included; the refused count in Refused too, the others in no
	// other counter.
	DNSQueries int64 `json:"dns_queries"`
}
