package api

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/hostcheck"
)

func TestInfo(t *testing.T) {
	started := time.Date(2025, 11, 26, 13, 0, 0, 0, time.UTC)
	probed := started.Add(time.Second)
	calls := 0
	e := newTestEnv(t, func(c *Config) {
		c.Info = &Info{Version: "v1.2.3", Runtime: "fake", StartedAt: started,
			Host: func(context.Context) hostcheck.Report {
				calls++
				return hostcheck.Report{OK: true, ProbedAt: probed, CheckedAt: probed.Add(time.Duration(calls) * time.Minute),
					Checks: []hostcheck.Check{
						{Name: "kernel", Status: hostcheck.OK, Mandatory: true, Found: "Linux 6.1", Meaning: "m"},
						{Name: "landlock", Status: hostcheck.Warn, Found: "not available", Meaning: "m", Fix: "lsm=landlock"},
					}}
			}}
	})
	ctx := context.Background()
	info, err := e.client(keyB).Info(ctx) // tenant B's admin key
	if err != nil {
		t.Fatal(err)
	}
	want := client.HostCheck{Name: "landlock", Status: "warn", Found: "not available", Meaning: "m", Fix: "lsm=landlock"}
	if info.Version != "v1.2.3" || info.Runtime != "fake" || !info.StartedAt.Equal(started) || !info.Host.OK ||
		!info.Host.ProbedAt.Equal(probed) || len(info.Host.Checks) != 2 || info.Host.Checks[1] != want ||
		!info.Host.Checks[0].Mandatory {
		t.Errorf("info %+v", info)
	}
	// Each request asks for the (refreshed) report again.
	again, err := e.client(keyB).Info(ctx)
	if err != nil || calls != 2 || !again.Host.CheckedAt.After(info.Host.CheckedAt) {
		t.Errorf("second info: %+v, %v (%d calls)", again, err, calls)
	}
	// Without the admin scope: 403, and the report is not taken.
	if _, err := e.client(keyA).Info(ctx); !errors.Is(err, client.ErrForbidden) || calls != 2 {
		t.Errorf("non-admin key: %v (%d calls)", err, calls)
	}
}

func TestInfoNotServed(t *testing.T) {
	e := newTestEnv(t)
	resp, body := e.do("GET", "/v1/info", keyB, "", nil)
	if resp.StatusCode != 501 || errCode(t, body) != CodeNotSupported {
		t.Errorf("without Info: %d %s", resp.StatusCode, body)
	}
}
