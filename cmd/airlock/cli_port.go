package main

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

const portUsage = `usage: airlock port [--sign [--ttl D]] [--json] ID PORT

Prints the URL of PORT (1-65535) on the loopback of sandbox ID: the
daemon proxies HTTP and WebSocket requests below it to a server
listening there inside the sandbox. Requests need the API key
(Authorization: Bearer KEY); a sandbox of another tenant is not found.

With --sign, prints instead a signed URL that a browser can open without
the key, for any number of requests until it expires (--ttl, default
10m, at most 24h). It is a credential: share it as you would the key.
`

func (c *cli) portCmd(ctx context.Context, args []string) (int, error) {
	fs := c.flags("port", portUsage)
	sign := fs.Bool("sign", false, "print a signed URL that needs no API key, for a browser")
	ttl := fs.Duration("ttl", 0, "how long the signed URL lasts (default 10m, at most 24h)")
	asJSON := fs.Bool("json", false, "print the signed URL's answer as JSON (with --sign)")
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) != 2 {
		return 2, usagef("usage: airlock port [--sign [--ttl D]] [--json] ID PORT (see airlock port -h)")
	}
	port, err := strconv.Atoi(pos[1])
	if err != nil || port < 1 || port > 65535 {
		return 2, usagef("PORT %q is not a number in 1-65535", pos[1])
	}
	if !*sign && (*ttl != 0 || *asJSON) {
		return 2, usagef("--ttl and --json go with --sign")
	}
	if *ttl < 0 || (*ttl > 0 && *ttl < time.Second) {
		return 2, usagef("--ttl %v: want at least 1s", *ttl)
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	if !*sign {
		u, err := cl.PortURL(pos[0], port)
		if err != nil {
			return fail(err)
		}
		_, err = fmt.Fprintln(c.stdout, u)
		return fail(err)
	}
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	su, err := cl.SignPortURL(ctx, pos[0], port, *ttl)
	if err != nil {
		return fail(err)
	}
	if *asJSON {
		return fail(c.printJSON(su)) // the API's wire form
	}
	_, err = fmt.Fprintln(c.stdout, cl.Absolute(su))
	return fail(err)
}
