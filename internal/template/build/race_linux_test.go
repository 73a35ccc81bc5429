//go:build linux && race

package build

// raceEnabled: the test binary cannot be a sandbox agent (it needs the
// pure-Go runtime, CGO_ENABLED=0, which -race excludes).
const raceEnabled = true
