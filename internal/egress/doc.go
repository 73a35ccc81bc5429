// Package egress is a sandbox's way out to the network in allowlist
// mode: a host-side proxy per sandbox that lets it reach only the
// destinations its Policy lists, and reports every decision.
//
// # Policy
//
// A Policy (ParsePolicy) is a validated allowlist of host names,
// "*.example.com" wildcards (any depth below example.com, not
// example.com itself), IPv4/IPv6 addresses and CIDRs, each with an
// optional port list. Policy.Decide judges a host or address and port
// before resolution; Policy.CheckAddr is the resolved-address guard:
// names are resolved on the host, and each address they resolve to is
// checked again, so that a listed name cannot lead to loopback, private
// (RFC 1918, ULA), link-local, CGNAT, unspecified, multicast, reserved or
// cloud metadata addresses (169.254.169.254, fd00:ec2::254) unless an
// address entry lists them explicitly. The proxy connects to the checked
// address itself, never to the name again, so a second resolution cannot
// swap the address (DNS rebinding).
//
// # Proxy
//
// A Proxy serves one sandbox on the listeners it is given (a unix socket
// the sandbox's agent bridges to, in production; any net.Listener in
// tests). It speaks, on the same listener:
//
//   - HTTP CONNECT tunnels;
//   - plain HTTP forwarding of absolute http:// URIs, hop-by-hop and
//     Proxy-* headers removed, each request decided and sent on its own
//     upstream connection while the client's stays alive;
//   - SOCKS5 (RFC 1928): no authentication, CONNECT only, names resolved
//     by the proxy (socks5h); BIND, UDP ASSOCIATE and SOCKS4 are refused
//     with their protocol's error.
//
// In a tunnel (CONNECT or SOCKS5) the client's first bytes are inspected
// without being consumed: a TLS ClientHello must carry the tunnel's host
// as its server name (SNI), and a plain HTTP request its Host; a mismatch
// is refused (a TLS access_denied alert, or an HTTP 403). Other protocols
// pass, since the destination itself is allowed. First bytes that may
// still become either must complete it within the handshake timeout, or
// the tunnel is refused. Only the start is inspected: what follows inside
// TLS cannot be, and later requests on a plain HTTP tunnel are not.
//
// SetPolicy swaps the allowlist atomically; it applies to every
// destination asked for afterwards. Limits cap concurrent connections,
// idle time, handshake time and header sizes, and optionally bandwidth;
// Stats is a snapshot of the counters.
//
// # DNS
//
// A plain HTTP request for http://dns.airlock.internal/dns-query (DNSHost,
// DNSPath) is the proxy's own DNS endpoint (RFC 8484: a POST of one
// application/dns-message query), answered by the proxy, never
// forwarded; the sandbox's agent sends every query asked inside to it.
// A name the policy covers (whatever the entry's ports) gets the A or
// AAAA records of the addresses its resolver gives, under the
// resolved-address guard, with a TTL of DNSTTL seconds; any other name
// gets REFUSED without being resolved, and an Event. Names under
// airlock.internal are never a destination and cannot be listed.
//
// # Credentials
//
// A Credential names a header, a stored secret and an exact host: the
// proxy sets the header, with the secret's value (Interception.Reveal,
// once per request), on every HTTP/1.1 request to that host, replacing
// the sandbox's own. For HTTPS it terminates the sandbox's TLS with a
// leaf certificate its CA mints for the tunnel's name (only http/1.1
// offered by ALPN), dials its own TLS to the destination verified
// against Interception.Roots, and relays requests one by one; plain
// HTTP, forwarded or tunnelled, gets the header too. Destinations
// without a credential are tunnelled untouched. Events name the secret
// (Event.Credential), never its value.
//
// # Evidence
//
// Every decision becomes an Event passed to Config.OnEvent: the
// destination as named, the address connected to (or refused), port,
// verdict and Reason, bytes each way and duration. The daemon adds the
// sandbox and writes it to the audit log. Refusals answer the client
// with a short message that names no host detail; the Event, for the
// operator, has the detail.
package egress
