package api

// The network modes (Network.Mode).
const (
	// NetworkNone: loopback only, the default.
	NetworkNone = "none"
	// NetworkAllowlist: only the destinations in Allow, through the
	// sandbox's egress proxy, which HTTP_PROXY, HTTPS_PROXY, ALL_PROXY
	// and NO_PROXY (both cases) name in every process started afterwards.
	NetworkAllowlist = "allowlist"
	// NetworkOpen: a routed interface of the sandbox's own, masqueraded
	// out of the server's uplink; the server, other sandboxes and the
	// private, link-local and metadata ranges are blocked unless Allow
	// lists them (IPv4 addresses and CIDRs). 501 when the server has no
	// uplink configured.
	NetworkOpen = "open"
)

// NetworkStats are the counters of a sandbox's egress proxy since it
// started (at create, at the switch to allowlist, or when a restarted
// server adopted the sandbox).
type NetworkStats struct {
	// Conns counts the connections made to the proxy.
	Conns int64 `json:"conns"`
	// Active is the connections open now.
	Active int64 `json:"active"`
	// Allowed and Refused count the decisions.
	Allowed int64 `json:"allowed"`
	Refused int64 `json:"refused"`
	// BytesUp went from the sandbox to destinations, BytesDown back.
	BytesUp   int64 `json:"bytes_up"`
	BytesDown int64 `json:"bytes_down"`
	// DNSQueries counts the DNS queries the proxy answered for the
	// sandbox, refused ones included (allowlist mode).
	DNSQueries int64 `json:"dns_queries,omitempty"`
}

// NetworkView is the body of GET and PATCH /v1/sandboxes/{id}/network:
// the sandbox's network policy, and its proxy's counters while it has one.
type NetworkView struct {
	// Mode is NetworkNone, NetworkAllowlist or NetworkOpen.
	Mode string `json:"mode"`
	// Allow is the allowlist, in canonical form.
	Allow []string `json:"allow"`
	// Credentials are the credentials added at the edge (names of
	// secrets, never values), in canonical form.
	Credentials []NetworkCredential `json:"credentials,omitempty"`
	// Limits are the proxy's limits in force (the sandbox's over the
	// server's); absent in other modes than allowlist.
	Limits *NetworkLimits `json:"limits,omitempty"`
	// Stats are the proxy's counters, or in mode open the open
	// network's (flows begun, open, refused packets, IP bytes of the
	// flows ended); absent in mode none.
	Stats *NetworkStats `json:"stats,omitempty"`
	// Address is the sandbox's own IPv4 address in mode open; absent in
	// other modes.
	Address string `json:"address,omitempty"`
}
