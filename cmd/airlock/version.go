package main

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"

	"github.com/airlock-sandbox/airlock/internal/daemon"
)

// printVersion runs `airlock version [--json]`.
func printVersion(w io.Writer, args []string) (int, error) {
	v := struct {
		Version string `json:"version"`
		Go      string `json:"go"`
		OS      string `json:"os"`
		Arch    string `json:"arch"`
	}{daemon.Version(), runtime.Version(), runtime.GOOS, runtime.GOARCH}
	switch {
	case len(args) == 0:
		_, err := fmt.Fprintf(w, "airlock %s (%s, %s/%s)\n", v.Version, v.Go, v.OS, v.Arch)
		return 0, err
	case len(args) == 1 && args[0] == "--json":
		return 0, json.NewEncoder(w).Encode(v)
	}
	return 2, usagef("usage: airlock version [--json]")
}
