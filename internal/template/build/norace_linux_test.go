//go:build linux && !race

package build

const raceEnabled = false
