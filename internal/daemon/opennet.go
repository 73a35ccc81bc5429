package daemon

import (
	"log/slog"
	"net/netip"

	"github.com/airlock-sandbox/airlock/internal/opennet"
)

// validPool reports whether s is a usable open network pool.
func validPool(s string) bool {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return false
	}
	_, err = opennet.NewPool(p)
	return err == nil
}

// openRouter starts the open network when cfg names an uplink; nil, nil
// when it does not (mode open is then refused). A configured open network
// that cannot start (no such uplink, nftables unusable) fails the daemon:
// it never runs sandboxes unfiltered.
func openRouter(cfg Config, log *slog.Logger) (*opennet.Router, error) {
	if cfg.OpenUplink == "" {
		return nil, nil
	}
	oc := opennet.Config{Uplink: cfg.OpenUplink, NetNS: cfg.OpenNetNS}
	if cfg.OpenPool != "" {
		oc.Pool = netip.MustParsePrefix(cfg.OpenPool) // validated
	}
	return opennet.New(oc, log)
}
