//go:build linux

package agent

import (
	"bytes"
	"context"
	"os"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// BenchmarkFileOpsCreds measures small file requests through an
// in-process agent over its socket, with the agent's own credentials
// ("agent": no switch, as the fake runtime does) and as an ordinary user
// ("user": every request on a locked thread with the user's filesystem
// ids, groups and no capabilities, as in a sandbox). The difference is
// the cost of the credential switch.
func BenchmarkFileOpsCreds(b *testing.B) {
	testutil.RequireRoot(b, "needs root to act as another user")
	for _, mode := range []string{"agent", "user"} {
		h := newFSHarness(b, func(o *Options) {
			o.SwitchUser = mode == "user"
			o.Users["user"] = User{Name: "user", UID: 1000, GID: 1000, Home: "/home/user"}
		})
		if err := os.Chmod(h.root, 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.Chown(h.host("/home/user"), 1000, 1000); err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		data := bytes.Repeat([]byte("x"), 4096)
		if _, err := h.client.WriteFile(ctx, "f", bytes.NewReader(data), agentclient.WriteOptions{}); err != nil {
			b.Fatal(err)
		}
		b.Run("stat/"+mode, func(b *testing.B) {
			for b.Loop() {
				if _, err := h.client.Stat(ctx, "f"); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("write4KiB/"+mode, func(b *testing.B) {
			for b.Loop() {
				if _, err := h.client.WriteFile(ctx, "f", bytes.NewReader(data), agentclient.WriteOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
