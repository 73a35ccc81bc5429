package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/airlock-sandbox/airlock/api"
)

// SandboxStats is one sample of a sandbox's resource use and caps: CPU
// (seconds used, and the rate in CPUs over the sample's interval),
// memory (current, peak, cap), tasks, its writable layer's disk use and
// its network bytes (absent in mode none; NetworkAbsent says why).
type SandboxStats = api.SandboxStats

// The parts of a SandboxStats.
type (
	StatsCPU     = api.StatsCPU
	StatsMemory  = api.StatsMemory
	StatsPids    = api.StatsPids
	StatsDisk    = api.StatsDisk
	StatsNetwork = api.StatsNetwork
)

// The bounds of a stats interval; 0 takes the server's default, 1 s.
const (
	MinStatsInterval = api.StatsIntervalMinMS * time.Millisecond
	MaxStatsInterval = api.StatsIntervalMaxMS * time.Millisecond
)

// maxStatsLine caps one line of a stats stream: a sample is about 500
// bytes.
const maxStatsLine = 64 << 10

// statsQuery is the query of a stats request, interval checked.
func statsQuery(interval time.Duration, stream bool) (url.Values, error) {
	q := url.Values{}
	if interval != 0 {
		if interval < MinStatsInterval || interval > MaxStatsInterval || interval%time.Millisecond != 0 {
			return nil, fmt.Errorf("airlock: stats interval %v: want whole milliseconds from %v to %v: %w", interval, MinStatsInterval, MaxStatsInterval, ErrInvalid)
		}
		q.Set("interval_ms", strconv.FormatInt(interval.Milliseconds(), 10))
	}
	if stream {
		q.Set("stream", "1")
	}
	return q, nil
}

// Stats returns one sample of sandbox id's resource use, its CPU rate
// measured over interval (0: the server's default, 1 s): the call takes
// that long. A sandbox that is not running is ErrConflict. Reading stats
// does not keep an idle sandbox alive.
func (c *Client) Stats(ctx context.Context, id string, interval time.Duration) (*SandboxStats, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	q, err := statsQuery(interval, false)
	if err != nil {
		return nil, err
	}
	var out SandboxStats
	if err := c.doJSON(ctx, http.MethodGet, sandboxPath(id, "/stats"), q, nil, &out, http.StatusOK); err != nil {
		return nil, err
	}
	return &out, nil
}

// StreamStats calls fn with a sample of sandbox id's resource use every
// interval (0: the server's default, 1 s) until the sandbox ends (it
// returns nil), ctx ends or fn fails (it returns that error). A stream
// counts against the server's caps on requests in flight per sandbox and
// per key.
func (c *Client) StreamStats(ctx context.Context, id string, interval time.Duration, fn func(*SandboxStats) error) error {
	if err := checkID(id); err != nil {
		return err
	}
	q, err := statsQuery(interval, true)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := c.newRequest(ctx, http.MethodGet, sandboxPath(id, "/stats"), q, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := c.send(req, http.StatusOK)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 4<<10), maxStatsLine)
	for sc.Scan() {
		var s SandboxStats
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			return fmt.Errorf("airlock: stats stream: malformed line: %w", err)
		}
		if err := fn(&s); err != nil {
			return err
		}
	}
	switch err := sc.Err(); {
	case err == nil:
		return nil // the sandbox ended
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, bufio.ErrTooLong):
		return fmt.Errorf("airlock: stats stream: line longer than %d bytes: %w", maxStatsLine, ErrResponseTooLarge)
	default:
		return fmt.Errorf("airlock: stats stream: %w", err)
	}
}
