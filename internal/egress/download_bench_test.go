package egress

import (
	"fmt"
	"io"
	"net"
	"testing"
)

// downloadSize is what BenchmarkDownload moves per op: the issue's
// 64 MiB download.
const downloadSize = 64 << 20

// sourceServer writes downloadSize bytes to each connection once it has
// read one byte (the request), then closes it.
func sourceServer(b *testing.B) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	chunk := make([]byte, 256<<10)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
					return
				}
				for n := 0; n < downloadSize; n += len(chunk) {
					if _, err := c.Write(chunk); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// BenchmarkDownload reads 64 MiB per op from a loopback server, over a
// fresh connection each time: directly and through a CONNECT tunnel of
// the proxy, side by side (MB/s is the throughput).
//
//	CGO_ENABLED=0 go test ./internal/egress -run '^$' -bench 'Download|ConnectSetup' -count 3
func BenchmarkDownload(b *testing.B) {
	port := sourceServer(b)
	h, _ := benchHarness(b)
	buf := make([]byte, 256<<10)
	run := func(b *testing.B, open func() (net.Conn, io.Reader, error)) {
		b.SetBytes(downloadSize)
		for b.Loop() {
			c, r, err := open()
			if err != nil {
				b.Fatal(err)
			}
			c.Write([]byte{'g'})
			n, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{r}, buf)
			c.Close()
			if err != nil || n != downloadSize {
				b.Fatalf("read %d bytes, %v", n, err)
			}
		}
	}
	b.Run("direct", func(b *testing.B) {
		run(b, func() (net.Conn, io.Reader, error) {
			c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
			return c, c, err
		})
	})
	b.Run("proxy", func(b *testing.B) {
		run(b, func() (net.Conn, io.Reader, error) {
			return proxyConnect(h.addr, fmt.Sprintf("bench.test:%d", port))
		})
	})
}
