package egress

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// sinkServer reads each connection to its end, then answers one byte:
// the writer knows every byte arrived.
func sinkServer(b *testing.B) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(io.Discard, c)
				c.Write([]byte{'k'})
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// benchHarness is a proxy whose events are only counted.
func benchHarness(b *testing.B) (*harness, *atomic.Int64) {
	var n atomic.Int64
	h := newHarness(b, []string{"bench.test", "127.0.0.1"}, map[string]string{"bench.test": "127.0.0.1"},
		func(c *Config) { c.OnEvent = func(Event) { n.Add(1) } })
	return h, &n
}

// proxyConnect opens a tunnel to target through the proxy at addr.
func proxyConnect(addr, target string) (net.Conn, *bufio.Reader, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err != nil || len(line) < 12 || line[9:12] != "200" {
		c.Close()
		return nil, nil, fmt.Errorf("CONNECT: %q %v", line, err)
	}
	if _, err := br.ReadString('\n'); err != nil { // the blank line
		c.Close()
		return nil, nil, err
	}
	return c, br, nil
}

// BenchmarkThroughput moves 1 MiB per op over loopback, directly and
// through a tunnel of the proxy, side by side.
func BenchmarkThroughput(b *testing.B) {
	port := sinkServer(b)
	h, _ := benchHarness(b)
	chunk := make([]byte, 1<<20)
	run := func(b *testing.B, c net.Conn, r io.Reader) {
		b.SetBytes(int64(len(chunk)))
		b.ResetTimer()
		for range b.N {
			if _, err := c.Write(chunk); err != nil {
				b.Fatal(err)
			}
		}
		c.(*net.TCPConn).CloseWrite()
		if _, err := io.ReadFull(r, make([]byte, 1)); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
	}
	b.Run("direct", func(b *testing.B) {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		run(b, c, c)
	})
	b.Run("proxy", func(b *testing.B) {
		c, br, err := proxyConnect(h.addr, fmt.Sprintf("bench.test:%d", port))
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		run(b, c, br)
	})
}

// BenchmarkConnectSetup measures opening a connection and one byte's
// round trip, directly and through a CONNECT tunnel (decision,
// resolution, dial, 200, inspection), and reports the median as p50-ns.
func BenchmarkConnectSetup(b *testing.B) {
	echo := newEchoServer(b)
	h, _ := benchHarness(b)
	direct := fmt.Sprintf("127.0.0.1:%d", echo.port())
	named := fmt.Sprintf("bench.test:%d", echo.port())
	run := func(b *testing.B, open func() (net.Conn, io.Reader, error)) {
		durs := make([]time.Duration, 0, b.N)
		one := make([]byte, 1)
		b.ResetTimer()
		for range b.N {
			start := time.Now()
			c, r, err := open()
			if err != nil {
				b.Fatal(err)
			}
			c.Write([]byte{'x'})
			if _, err := io.ReadFull(r, one); err != nil {
				b.Fatal(err)
			}
			durs = append(durs, time.Since(start))
			c.Close()
		}
		b.StopTimer()
		slices.Sort(durs)
		b.ReportMetric(float64(durs[len(durs)/2].Nanoseconds()), "p50-ns")
	}
	b.Run("direct", func(b *testing.B) {
		run(b, func() (net.Conn, io.Reader, error) {
			c, err := net.Dial("tcp", direct)
			return c, c, err
		})
	})
	b.Run("proxy", func(b *testing.B) {
		run(b, func() (net.Conn, io.Reader, error) {
			c, br, err := proxyConnect(h.addr, named)
			return c, br, err
		})
	})
}
