package client_test

import (
	"context"
	"fmt"
	"os"

	"github.com/airlock-sandbox/airlock/client"
)

// The README's Go quickstart. It is compiled with the tests but not run
// (it needs a daemon).
func Example() {
	ctx := context.Background()
	err := func() error {
		c, err := client.New("http://127.0.0.1:7070", os.Getenv("AIRLOCK_API_KEY"))
		if err != nil {
			return err
		}
		sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{})
		if err != nil {
			return err
		}
		defer c.DeleteSandbox(ctx, sb.ID)
		res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Command: "echo hi"})
		if err != nil {
			return err
		}
		os.Stdout.Write(res.Stdout) // errors match client.ErrNotFound, client.ErrRateLimited, ...
		return nil
	}()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
}
