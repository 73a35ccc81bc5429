// Package e2e holds Airlock's end-to-end tests: they build the airlock
// binary, run `airlock serve` as a real process on a fresh data directory
// and drive real sandboxes through the public Go client (and, to measure
// the API's overhead, straight through a sandbox's agent socket). They
// cover the public API surface, adoption of running sandboxes by a
// restarted daemon, crash safety of the audit log (intents and outcomes)
// and of sandbox records when the daemon is killed mid-burst, a graceful
// stop during PTY sessions, execs and code cells (no open intent), a full
// data disk (readiness, a quiet log), slow and oversized requests (slowloris, trickled bodies, huge headers, a client
// that stops reading a stream), the caps on execs in flight under a flood
// of 1,000 concurrent execs (429s and the daemon's peak RSS), recovery of a
// sandbox whose fork bomb took every pid (process list and kill-all), every
// limit of a sandbox (memory, pids, CPU, the timeout's tree kill, the usage
// reported) before and after restarts, the daemon failing closed when a
// cgroup controller is withheld (at start and at a create), a sandbox whose
// agent is killed (failed and released at once), the ends the daemon
// decides itself (audited, visible until the retention ends), the daemon's
// threads and descriptors per sandbox, a bounded load run and the latency
// the HTTP API adds to an exec.
//
// Each test daemon runs in a private mount namespace in which the
// runtime's cgroup parent ("airlock") is a bind mount of a cgroup of the
// test run's own: a daemon removes every sandbox cgroup under its parent
// that is not in its own data directory, so without that the tests and any
// other daemon on the host would destroy each other's sandboxes. A final
// check fails the run if a daemon, a sandbox process or a sandbox cgroup
// is left behind.
//
// AIRLOCK_E2E_SHAPE=container (cgroup v2 only) starts each test's daemons
// as a container runtime starts a container's process instead: in a
// cgroup of its own that another process (a keeper) shares, in a cgroup
// namespace rooted there, with a fresh cgroup2 mounted at /sys/fs/cgroup,
// so that the daemon sees that cgroup as "/" and puts its sandboxes below
// it (see container_test.go). AIRLOCK_E2E_BIN names a prebuilt static
// airlock binary to test instead of building one, for a machine without
// the go tool: internal/vmtest runs these tests that way in cgroup v2
// guests, in both shapes (TestVMDaemon).
//
// The tests need root (the daemon creates namespaces, cgroups and mounts)
// and skip otherwise. Run them with
//
//	CGO_ENABLED=0 go test -count=1 -v ./internal/e2e/
//
// AIRLOCK_E2E_LOAD_EXECS sets the execs per client of TestLoad (default
// 50; 2000 for the documented load run). The package has no non-test code.
package e2e
