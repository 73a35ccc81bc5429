package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
)

// runCode runs a cell and fails the test on a request error.
func runCode(t *testing.T, ctx context.Context, c *client.Client, id string, req client.RunCodeRequest) *client.CodeExecution {
	t.Helper()
	x, err := c.RunCode(ctx, id, req)
	if err != nil {
		t.Fatalf("run %q: %v", req.Code, err)
	}
	return x
}

func mainText(x *client.CodeExecution) string {
	if r := x.MainResult(); r != nil {
		return r.Text
	}
	return ""
}

// sandboxHas reports whether a command succeeds in the sandbox.
func sandboxHas(t *testing.T, ctx context.Context, d *daemon, id string, cmd ...string) bool {
	t.Helper()
	res, err := d.C.Exec(ctx, id, client.ExecRequest{Cmd: cmd})
	if err != nil {
		t.Fatal(err)
	}
	return res.Status == client.StatusSuccess
}

// TestCodeInterpreter drives the code interpreter of a real daemon: state
// across cells in the three languages, timeouts that keep the state, rich
// results, and contexts that survive a restart of the daemon.
func TestCodeInterpreter(t *testing.T) {
	e := newEnv(t)
	d := e.start()
	ctx := ctxT(t, 4*time.Minute)
	sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Limits: &client.Limits{MemoryMB: 1024}})
	if err != nil {
		t.Fatal(err)
	}
	track(sb.ID)
	id := sb.ID

	for _, tt := range []struct {
		lang, bin            string
		set, loop, get, want string
	}{
		{client.LangPython, "python3", "x = 6 * 7", "while True: pass", "x", "42"},
		{client.LangJavaScript, "node", "var x = 6 * 7", "while (true) {}", "x", "42"},
		{client.LangBash, "bash", "x=42; cd /tmp", "while :; do :; done", "echo $x $PWD", "42 /tmp\n"},
	} {
		if !sandboxHas(t, ctx, d, id, "sh", "-c", "command -v "+tt.bin) {
			t.Logf("%s is not in the sandbox; skipping %s", tt.bin, tt.lang)
			continue
		}
		runCode(t, ctx, d.C, id, client.RunCodeRequest{Language: tt.lang, Code: tt.set})
		t0 := time.Now()
		x := runCode(t, ctx, d.C, id, client.RunCodeRequest{Language: tt.lang, Code: tt.loop, Timeout: time.Second})
		if x.Status != client.CodeStatusTimeout || time.Since(t0) > 10*time.Second {
			t.Errorf("%s: endless loop: %+v after %v", tt.lang, x, time.Since(t0))
		}
		x = runCode(t, ctx, d.C, id, client.RunCodeRequest{Language: tt.lang, Code: tt.get})
		got := mainText(x)
		if tt.lang == client.LangBash {
			got = x.Stdout
		}
		if got != tt.want || x.Status != client.CodeStatusOK {
			t.Errorf("%s: after the timeout %q (%s %+v), want %q", tt.lang, got, x.Status, x.Error, tt.want)
		}
	}

	py := func(code string) *client.CodeExecution {
		return runCode(t, ctx, d.C, id, client.RunCodeRequest{Language: client.LangPython, Code: code})
	}
	// stdout and stderr in order, an exception with its traceback.
	var order []string
	x, err := d.C.RunCodeStream(ctx, id, client.RunCodeRequest{Language: client.LangPython,
		Code: "import sys, subprocess\nprint('one')\nprint('two', file=sys.stderr)\nsubprocess.run(['echo', 'three'])\nprint('four', file=sys.stderr)\n" +
			"def fail():\n    raise RuntimeError('five')\nfail()"},
		func(ev client.CodeEvent) error {
			if ev.Type == "stdout" || ev.Type == "stderr" {
				order = append(order, ev.Type+":"+strings.TrimSpace(ev.Data))
			}
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(order, ",") != "stdout:one,stderr:two,stdout:three,stderr:four" {
		t.Errorf("output order %q", order)
	}
	if x.Status != client.CodeStatusError || x.Error == nil || x.Error.Name != "RuntimeError" ||
		!strings.Contains(x.Error.Traceback, "in fail") || !strings.Contains(x.Error.Traceback, "raise RuntimeError('five')") {
		t.Errorf("exception: %+v %+v", x.Status, x.Error)
	}

	if sandboxHas(t, ctx, d, id, "python3", "-c", "import pandas, matplotlib") {
		x = py("import matplotlib.pyplot as plt\nfig, ax = plt.subplots(figsize=(6.4, 3.2), dpi=100)\nax.plot([3, 1, 2])\nplt.show()")
		if x.Status != client.CodeStatusOK || len(x.Results) != 1 {
			t.Fatalf("chart: %+v %+v", x, x.Error)
		}
		img, err := png.Decode(bytes.NewReader(x.Results[0].PNG))
		if err != nil {
			t.Fatalf("chart is not a PNG: %v", err)
		}
		if s := img.Bounds().Size(); s.X != 640 || s.Y != 320 {
			t.Errorf("chart is %v, want 640x320", s)
		}
		x = py("import pandas as pd\ndf = pd.DataFrame({'city': ['Oslo', 'Lima'], 'temp': [4.5, 19.0]})\ndf")
		if r := x.MainResult(); r == nil || !strings.Contains(r.HTML, "<table") || !strings.Contains(r.HTML, "Lima") || !strings.Contains(r.Text, "Oslo") {
			t.Errorf("DataFrame: %+v", x.Results)
		}
	} else {
		t.Log("pandas or matplotlib is not in the sandbox; skipping the chart and the DataFrame")
	}

	// A named context and the default one survive a restart of the daemon.
	cc, err := d.C.CreateCodeContext(ctx, id, client.CreateCodeContextRequest{Language: client.LangPython})
	if err != nil {
		t.Fatal(err)
	}
	runCode(t, ctx, d.C, id, client.RunCodeRequest{ContextID: cc.ID, Code: "kept = [1, 2, 3]"})
	d.Stop()
	d = e.start()
	if x := runCode(t, ctx, d.C, id, client.RunCodeRequest{ContextID: cc.ID, Code: "sum(kept)"}); mainText(x) != "6" {
		t.Errorf("named context after a daemon restart: %+v %+v", x, x.Error)
	}
	if x := py("x"); mainText(x) != "42" {
		t.Errorf("default context after a daemon restart: %+v %+v", x, x.Error)
	}
	list, err := d.C.ListCodeContexts(ctx, id)
	if err != nil || len(list) < 2 {
		t.Errorf("contexts after the restart: %+v %v", list, err)
	}
	if err := d.C.DeleteSandbox(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := d.C.ListCodeContexts(ctx, id); err == nil {
		t.Error("contexts of a deleted sandbox are listed")
	}
}

// salesRow is one generated order.
type salesRow struct {
	region     string
	product    string
	month      int
	quantity   int64
	priceCents int64
}

var (
	salesRegions  = []string{"North", "South", "East", "West", "Central"}
	salesProducts = []string{"widget", "gadget", "doohickey", "gizmo", "sprocket", "flange", "grommet", "bracket"}
)

// salesCSV writes about size bytes of orders and returns the expected
// revenue (cents), order count and quantity per region, and revenue per
// month.
func salesCSV(w io.Writer, size int) (revenue, orders, quantity map[string]int64, monthly [12]int64, rows int, err error) {
	bw := bufio.NewWriterSize(w, 1<<16)
	r := rand.New(rand.NewPCG(1, 2))
	revenue, orders, quantity = map[string]int64{}, map[string]int64{}, map[string]int64{}
	n, _ := bw.WriteString("order_id,date,region,product,quantity,unit_price\n")
	written := n
	var line []byte
	for written < size {
		rows++
		row := salesRow{
			region:     salesRegions[r.IntN(len(salesRegions))],
			product:    salesProducts[r.IntN(len(salesProducts))],
			month:      1 + r.IntN(12),
			quantity:   1 + r.Int64N(20),
			priceCents: 99 + r.Int64N(50000),
		}
		day := 1 + r.IntN(28)
		line = line[:0]
		line = strconv.AppendInt(line, int64(rows), 10)
		line = fmt.Appendf(line, ",2024-%02d-%02d,%s,%s,%d,%d.%02d\n", row.month, day, row.region, row.product,
			row.quantity, row.priceCents/100, row.priceCents%100)
		n, err = bw.Write(line)
		if err != nil {
			return
		}
		written += n
		rev := row.quantity * row.priceCents
		revenue[row.region] += rev
		orders[row.region]++
		quantity[row.region] += row.quantity
		monthly[row.month-1] += rev
	}
	err = bw.Flush()
	return
}

// TestCodeSalesAnalysis is the scenario end to end: a generated 50 MB CSV
// goes in through the files API, pandas aggregates it, matplotlib plots
// it, and the chart and the summary table come back; the numbers are
// checked against what the test computed while generating the data.
func TestCodeSalesAnalysis(t *testing.T) {
	e := newEnv(t)
	d := e.start()
	ctx := ctxT(t, 4*time.Minute)
	sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Limits: &client.Limits{MemoryMB: 2048, DiskMB: 1024}})
	if err != nil {
		t.Fatal(err)
	}
	track(sb.ID)
	if !sandboxHas(t, ctx, d, sb.ID, "python3", "-c", "import pandas, matplotlib") {
		t.Skip("pandas and matplotlib are not in the sandbox (apt-get install python3-pandas python3-matplotlib)")
	}

	pr, pw := io.Pipe()
	type expected struct {
		revenue, orders, quantity map[string]int64
		monthly                   [12]int64
		rows                      int
	}
	done := make(chan expected, 1)
	go func() {
		var x expected
		var err error
		x.revenue, x.orders, x.quantity, x.monthly, x.rows, err = salesCSV(pw, 50<<20)
		pw.CloseWithError(err)
		done <- x
	}()
	t0 := time.Now()
	fi, err := d.C.WriteFile(ctx, sb.ID, "data/sales.csv", pr)
	if err != nil {
		t.Fatal(err)
	}
	want := <-done
	t.Logf("uploaded %d rows, %d MB in %v", want.rows, fi.Size>>20, time.Since(t0).Round(time.Millisecond))

	code := `import json
import pandas as pd
import matplotlib.pyplot as plt
df = pd.read_csv('data/sales.csv', parse_dates=['date'])
df['revenue_cents'] = (df['unit_price'] * 100).round().astype('int64') * df['quantity']
summary = df.groupby('region').agg(orders=('order_id', 'count'), quantity=('quantity', 'sum'),
                                   revenue_cents=('revenue_cents', 'sum')).sort_values('revenue_cents', ascending=False)
monthly = df.groupby(df['date'].dt.month)['revenue_cents'].sum()
fig, ax = plt.subplots(figsize=(8, 4), dpi=100)
(summary['revenue_cents'] / 100).plot.bar(ax=ax, title='Revenue by region')
ax.set_ylabel('revenue')
plt.show()
print(json.dumps({'rows': len(df), 'summary': {r: {k: int(v) for k, v in row.items()} for r, row in summary.iterrows()},
                  'monthly': [int(monthly.get(m, 0)) for m in range(1, 13)]}))
summary`
	t0 = time.Now()
	x := runCode(t, ctx, d.C, sb.ID, client.RunCodeRequest{Language: client.LangPython, Code: code, Timeout: 3 * time.Minute})
	t.Logf("analysis took %v (cell %v)", time.Since(t0).Round(time.Millisecond), x.Duration)
	if x.Status != client.CodeStatusOK {
		t.Fatalf("analysis: %s %+v stderr %q", x.Status, x.Error, x.Stderr)
	}
	var got struct {
		Rows    int                         `json:"rows"`
		Summary map[string]map[string]int64 `json:"summary"`
		Monthly []int64                     `json:"monthly"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(x.Stdout)), &got); err != nil {
		t.Fatalf("summary output %q: %v", x.Stdout, err)
	}
	if got.Rows != want.rows {
		t.Errorf("rows %d, want %d", got.Rows, want.rows)
	}
	for _, r := range salesRegions {
		s := got.Summary[r]
		if s["orders"] != want.orders[r] || s["quantity"] != want.quantity[r] || s["revenue_cents"] != want.revenue[r] {
			t.Errorf("%s: %v, want orders %d quantity %d revenue %d", r, s, want.orders[r], want.quantity[r], want.revenue[r])
		}
	}
	if !slices.Equal(got.Monthly, want.monthly[:]) {
		t.Errorf("monthly revenue %v, want %v", got.Monthly, want.monthly)
	}
	// The chart (first result) and the summary table (the main result).
	if len(x.Results) != 2 {
		t.Fatalf("results: %d", len(x.Results))
	}
	img, err := png.Decode(bytes.NewReader(x.Results[0].PNG))
	if err != nil {
		t.Fatalf("chart: %v", err)
	}
	if s := img.Bounds().Size(); s.X != 800 || s.Y != 400 {
		t.Errorf("chart is %v, want 800x400", s)
	}
	table := x.MainResult()
	best := slices.MaxFunc(salesRegions, func(a, b string) int { return int(want.revenue[a] - want.revenue[b]) })
	if table == nil || !strings.Contains(table.HTML, "<table") || !strings.Contains(table.HTML, best) ||
		!strings.Contains(table.HTML, strconv.FormatInt(want.revenue[best], 10)) {
		t.Errorf("summary table: %+v", table)
	}
}

// TestCodeBench measures, in one run: the round trip of a warm cell
// `1+1` through the API, and the first cell of a new Python context
// against a bare `python3 -c pass` through exec, interleaved.
func TestCodeBench(t *testing.T) {
	e := newEnv(t)
	d := e.start()
	ctx := ctxT(t, 4*time.Minute)
	sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	track(sb.ID)
	if !sandboxHas(t, ctx, d, sb.ID, "sh", "-c", "command -v python3") {
		t.Skip("python3 is not in the sandbox")
	}
	cc, err := d.C.CreateCodeContext(ctx, sb.ID, client.CreateCodeContextRequest{Language: client.LangPython})
	if err != nil {
		t.Fatal(err)
	}
	cell := func() time.Duration {
		t0 := time.Now()
		x, err := d.C.RunCode(ctx, sb.ID, client.RunCodeRequest{ContextID: cc.ID, Code: "1+1"})
		el := time.Since(t0)
		if err != nil || mainText(x) != "2" {
			t.Fatalf("1+1: %+v %v", x, err)
		}
		return el
	}
	for range 30 {
		cell()
	}
	const n = 500
	warm := make([]time.Duration, 0, n)
	for range n {
		warm = append(warm, cell())
	}
	slices.Sort(warm)

	first := func() time.Duration {
		t0 := time.Now()
		c, err := d.C.CreateCodeContext(ctx, sb.ID, client.CreateCodeContextRequest{Language: client.LangPython})
		if err != nil {
			t.Fatal(err)
		}
		x, err := d.C.RunCode(ctx, sb.ID, client.RunCodeRequest{ContextID: c.ID, Code: "1+1"})
		el := time.Since(t0)
		if err != nil || mainText(x) != "2" {
			t.Fatalf("first cell: %+v %v", x, err)
		}
		if err := d.C.DeleteCodeContext(ctx, sb.ID, c.ID); err != nil && !errors.Is(err, client.ErrNotFound) {
			t.Fatal(err)
		}
		return el
	}
	bare := func() time.Duration {
		t0 := time.Now()
		res, err := d.C.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"python3", "-c", "pass"}})
		el := time.Since(t0)
		if err != nil || res.Status != client.StatusSuccess {
			t.Fatalf("python3 -c pass: %+v %v", res, err)
		}
		return el
	}
	first()
	bare()
	const m = 40
	fs, bs := make([]time.Duration, 0, m), make([]time.Duration, 0, m)
	for i := range m {
		if i%2 == 0 {
			fs = append(fs, first())
			bs = append(bs, bare())
		} else {
			bs = append(bs, bare())
			fs = append(fs, first())
		}
	}
	slices.Sort(fs)
	slices.Sort(bs)
	ratio := float64(percentile(fs, 50)) / float64(percentile(bs, 50))
	summary := fmt.Sprintf("e2e-code: warm cell `1+1` through the API, %d runs: p50 %v p90 %v p99 %v; "+
		"first cell of a new Python context (create + `1+1`) p50 %v p90 %v vs exec `python3 -c pass` p50 %v p90 %v, %d interleaved runs each: %.2fx",
		n, percentile(warm, 50).Round(time.Microsecond), percentile(warm, 90).Round(time.Microsecond), percentile(warm, 99).Round(time.Microsecond),
		percentile(fs, 50).Round(time.Microsecond), percentile(fs, 90).Round(time.Microsecond),
		percentile(bs, 50).Round(time.Microsecond), percentile(bs, 90).Round(time.Microsecond), m, ratio)
	t.Log(summary)
	fmt.Println(summary)
	// Generous bounds: the documented targets are 2 ms and 2x on a quiet
	// machine; a shared CI runner must not fail on noise.
	if p := percentile(warm, 50); p > 20*time.Millisecond {
		t.Errorf("warm cell p50 %v", p)
	}
	if ratio > 4 {
		t.Errorf("the first cell of a new context takes %.1fx a bare python3 start", ratio)
	}
}
