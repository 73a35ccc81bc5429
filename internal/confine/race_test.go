//go:build race

package confine

// raceEnabled: the race detector links cgo, and Apply cannot run in a cgo
// binary, so the re-exec scenarios skip.
const raceEnabled = true
