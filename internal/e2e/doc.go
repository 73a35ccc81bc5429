// Package e2e holds Airlock's end-to-end tests: they build the airlock
// binary, run `airlock serve` as a real process on a fresh data directory
// and drive real sandboxes through the public Go client (and, to measure
// the API's overhead, straight through a sandbox's agent socket). They
// cover the public API surface, adoption of running sandboxes by a
// restarted daemon, crash safety of the audit log (intents and outcomes)
// and of sandbox records when the daemon is killed mid-burst, slow and
// oversized requests (slowloris, trickled bodies, huge headers, a client
// that stops reading a stream), the caps on execs in flight under a flood
// of 1,000 concurrent execs (429s and the daemon's peak RSS), recovery of a
// sandbox whose fork bomb took every pid (process list and kill-all), a
// bounded load run and the latency the HTTP API adds to an exec.
//
// Each test daemon runs in a private mount namespace in which the
// runtime's cgroup parent ("airlock") is a bind mount of a cgroup of the
// test run's own: a daemon removes every sandbox cgroup under its parent
// that is not in its own data directory, so without that the tests and any
// other daemon on the host would destroy each other's sandboxes. A final
// check fails the run if a daemon, a sandbox process or a sandbox cgroup
// is left behind.
//
// The tests need root (the daemon creates namespaces, cgroups and mounts)
// and skip otherwise. Run them with
//
//	CGO_ENABLED=0 go test -count=1 -v ./internal/e2e/
//
// AIRLOCK_E2E_LOAD_EXECS sets the execs per client of TestLoad (default
// 50; 2000 for the documented load run). The package has no non-test code.
package e2e
