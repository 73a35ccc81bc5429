package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/client"
)

const statsUsage = `usage: airlock stats [--no-stream] [--interval D] [--json] ID...

A live view of sandboxes' resource use, like docker stats: one row per
sandbox, redrawn every interval (default 1s, 100ms to 1m) until you stop
it or every sandbox has ended. CPU is the CPUs used over the last
interval against the sandbox's CPU limit; MEM its memory (processes,
agent and the files of its writable layer) against its cap; DISK what
its writable layer holds; NET the bytes in and out (its egress proxy's
in mode allowlist, its interface's in mode open, "-" in mode none);
PIDS its tasks against their cap.

--no-stream prints one sample of each (measured over one interval) and
exits. --json prints samples as the API's JSON: with --no-stream an
array, else one object a line as they come.
`

// maxStatsIDs caps the sandboxes one stats view follows, each a stream.
const maxStatsIDs = 64

func (c *cli) statsCmd(ctx context.Context, args []string) (int, error) {
	fs := c.flags("stats", statsUsage)
	noStream := fs.Bool("no-stream", false, "print one sample of each sandbox and exit")
	asJSON := fs.Bool("json", false, "print the samples as JSON")
	interval := durationFlag(time.Second)
	fs.Var(&interval, "interval", "time between samples, and the window of the CPU rate (100ms to 1m)")
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) == 0 {
		return 2, usagef("usage: airlock stats [--no-stream] [--interval D] [--json] ID... (see airlock stats -h)")
	}
	if len(pos) > maxStatsIDs {
		return 2, usagef("at most %d sandboxes at once", maxStatsIDs)
	}
	if d := time.Duration(interval); d < client.MinStatsInterval || d > client.MaxStatsInterval || d%time.Millisecond != 0 {
		return 2, usagef("--interval must be whole milliseconds from %v to %v", client.MinStatsInterval, client.MaxStatsInterval)
	}
	ids := slices.Compact(slices.Clone(pos))
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	if *noStream {
		return c.statsOnce(ctx, cl, ids, time.Duration(interval), *asJSON)
	}
	return c.statsLive(ctx, cl, ids, time.Duration(interval), *asJSON)
}

// statsOnce prints one sample of each sandbox, read in parallel.
func (c *cli) statsOnce(ctx context.Context, cl *client.Client, ids []string, interval time.Duration, asJSON bool) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, controlTimeout+interval)
	defer cancel()
	samples := make([]*client.SandboxStats, len(ids))
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() { samples[i], errs[i] = cl.Stats(ctx, id, interval) })
	}
	wg.Wait()
	failed := 0
	var got []*client.SandboxStats
	rows := make([][]string, 0, len(ids))
	for i, id := range ids {
		if errs[i] != nil {
			failed++
			fmt.Fprintf(c.stderr, "airlock: %s: %v\n", id, friendly(errs[i]))
			continue
		}
		got = append(got, samples[i])
		rows = append(rows, statsRow(id, samples[i], ""))
	}
	if asJSON {
		if got == nil {
			got = []*client.SandboxStats{}
		}
		if err := c.printJSON(got); err != nil {
			return fail(err)
		}
	} else if len(rows) > 0 {
		if err := c.table(statsHeader, rows); err != nil {
			return fail(err)
		}
	}
	if failed > 0 {
		return 1, &cliError{msg: fmt.Sprintf("%d of %d sandboxes have no stats", failed, len(ids))}
	}
	return 0, nil
}

// statsView is the latest of each sandbox's stream.
type statsView struct {
	mu     sync.Mutex
	latest map[string]*client.SandboxStats
	state  map[string]string // "" while streaming, else why the stream ended
}

// statsLive follows every sandbox's stream and redraws the table every
// interval (on a terminal in place; otherwise a table per interval), or
// with asJSON prints each sample as a line, until ctx ends or every
// stream has ended.
func (c *cli) statsLive(ctx context.Context, cl *client.Client, ids []string, interval time.Duration, asJSON bool) (int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	v := &statsView{latest: map[string]*client.SandboxStats{}, state: map[string]string{}}
	var out sync.Mutex // one JSON line at a time
	enc := json.NewEncoder(c.stdout)
	var wg sync.WaitGroup
	failed := 0
	for _, id := range ids {
		wg.Go(func() {
			err := cl.StreamStats(ctx, id, interval, func(s *client.SandboxStats) error {
				if asJSON {
					out.Lock()
					defer out.Unlock()
					return enc.Encode(s)
				}
				v.mu.Lock()
				v.latest[id] = s
				v.mu.Unlock()
				return nil
			})
			v.mu.Lock()
			defer v.mu.Unlock()
			switch {
			case err == nil:
				v.state[id] = "ended"
			case ctx.Err() != nil:
				v.state[id] = "stopped"
			default:
				failed++
				v.state[id] = "error"
				fmt.Fprintf(c.stderr, "airlock: %s: %v\n", id, friendly(err))
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	tty := false
	if f, ok := c.stdout.(*os.File); ok && isTerminal(f) {
		tty = true
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			<-done
			return 0, nil
		case <-done:
			if !asJSON {
				c.drawStats(v, ids, tty)
			}
			if failed == len(ids) {
				return 1, &cliError{msg: "no sandbox has stats"}
			}
			return 0, nil
		case <-tick.C:
			if !asJSON {
				c.drawStats(v, ids, tty)
			}
		}
	}
}

// drawStats prints the table of v's latest samples: in place on a
// terminal, else followed by a blank line.
func (c *cli) drawStats(v *statsView, ids []string, tty bool) {
	v.mu.Lock()
	rows := make([][]string, 0, len(ids))
	for _, id := range ids {
		s, state := v.latest[id], v.state[id]
		if s == nil && state == "" {
			state = "waiting"
		}
		if s == nil && state == "error" {
			continue
		}
		rows = append(rows, statsRow(id, s, state))
	}
	v.mu.Unlock()
	if tty {
		fmt.Fprint(c.stdout, "\033[H\033[2J") // home, clear
	}
	_ = c.table(statsHeader, rows)
	if !tty {
		fmt.Fprintln(c.stdout)
	}
}

var statsHeader = []string{"SANDBOX", "CPU", "CPU %", "MEM / LIMIT", "MEM %", "MEM PEAK", "DISK / SIZE", "NET IN / OUT", "PIDS", "STATE"}

// statsRow is the table row of sandbox id's sample s (nil: none yet, or
// the stream ended before one), with state ("" while live).
func statsRow(id string, s *client.SandboxStats, state string) []string {
	if state == "" {
		state = "live"
	}
	if s == nil {
		return []string{id, "-", "-", "-", "-", "-", "-", "-", "-", state}
	}
	net := "-"
	if n := s.Network; n != nil {
		net = formatBytes(int64(n.RxBytes)) + " / " + formatBytes(int64(n.TxBytes))
	}
	return []string{
		id,
		fmt.Sprintf("%.2f / %.2f", s.CPU.Rate, s.CPU.Limit),
		percent(s.CPU.Rate, s.CPU.Limit),
		formatBytes(int64(s.Memory.CurrentBytes)) + " / " + limitBytes(s.Memory.LimitBytes),
		percent(float64(s.Memory.CurrentBytes), float64(s.Memory.LimitBytes)),
		formatBytes(int64(s.Memory.PeakBytes)),
		formatBytes(int64(s.Disk.UsedBytes)) + " / " + limitBytes(s.Disk.LimitBytes),
		net,
		fmt.Sprintf("%d / %s", s.Pids.Current, limitCount(s.Pids.Limit)),
		state,
	}
}

// percent is part of whole in percent, "-" without a whole.
func percent(part, whole float64) string {
	if whole <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*part/whole)
}

// limitBytes shows a cap in bytes, "none" for 0.
func limitBytes(n uint64) string {
	if n == 0 {
		return "none"
	}
	return formatBytes(int64(n))
}

// limitCount shows a cap, "none" for 0.
func limitCount(n uint64) string {
	if n == 0 {
		return "none"
	}
	return fmt.Sprint(n)
}
