// Command airlock is Airlock's single binary: the daemon, the in-sandbox
// agent and the command-line client.
package main

import (
	"fmt"
	"os"

	"github.com/airlock-sandbox/airlock/internal/runtime/linux"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == linux.AgentCommand {
		os.Exit(linux.RunAgent())
	}
	fmt.Fprintln(os.Stderr, "usage: airlock agent")
	os.Exit(2)
}
