module github.com/airlock-sandbox/airlock

go 1.26.0

require (
	connectrpc.com/connect v1.21.1 // indirect
	github.com/creack/pty v1.1.24 // indirect
	github.com/elastic/go-seccomp-bpf v1.6.0 // indirect
	github.com/fsnotify/fsnotify v1.10.1 // indirect
	github.com/landlock-lsm/go-landlock v0.11.0 // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
