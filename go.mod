module github.com/airlock-sandbox/airlock

go 1.26.0

require (
	connectrpc.com/connect v1.21.1
	github.com/creack/pty v1.1.24
	github.com/elastic/go-seccomp-bpf v1.6.0
	golang.org/x/net v0.62.0
	golang.org/x/sys v0.49.0
	google.golang.org/protobuf v1.36.12
)
