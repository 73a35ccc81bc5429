package api

import (
	"bytes"
	"context"
	"testing"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/agentclient"
)

// The API's overhead on one exec: the same command through HTTP, JSON,
// authentication, the ownership check and the audit log (a fake), versus
// Manager.Exec called directly. Run both in one go:
//
//	CGO_ENABLED=0 go test ./internal/api -run '^$' -bench 'Exec(API|Direct)' -benchtime 200x

// benchCommand prints a little, so that output is carried both ways.
var benchCommand = []string{"echo", "hello"}

func BenchmarkExecAPI(b *testing.B) {
	ctx := context.Background()
	e := newTestEnv(b)
	c := e.client(keyA)
	sb := e.sandbox(ctx)
	b.ResetTimer()
	for b.Loop() {
		res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: benchCommand})
		if err != nil || res.ExitCode != 0 || string(res.Stdout) != "hello\n" {
			b.Fatal(res, err)
		}
		e.audit.take()
	}
}

func BenchmarkExecDirect(b *testing.B) {
	ctx := context.Background()
	e := newTestEnv(b)
	sb := e.sandbox(ctx)
	b.ResetTimer()
	for b.Loop() {
		var out bytes.Buffer
		res, err := e.mgr.Exec(ctx, sb.ID, agentclient.ExecRequest{Argv: benchCommand, Stdout: &out})
		if err != nil || res.ExitCode != 0 || out.String() != "hello\n" {
			b.Fatal(res, err)
		}
	}
}
