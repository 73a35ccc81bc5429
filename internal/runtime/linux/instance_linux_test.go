package linux

import (
	"fmt"
	"os"
	"os/exec"
	goruntime "runtime"
	"strings"
	"syscall"
	"testing"
)

func TestDescribeTree(t *testing.T) {
	child := exec.Command("sleep", "10")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer child.Wait()
	defer child.Process.Kill()
	goruntime.LockOSThread() // the running thread is this one
	defer goruntime.UnlockOSThread()
	self := os.Getpid()
	start, err := procStartTime(self)
	if err != nil {
		t.Fatal(err)
	}
	got := describeTree(self, start)
	// The calling thread is running; the child is described after it.
	self1 := fmt.Sprintf("pid %d: ", self)
	running := fmt.Sprintf(" %d R in ", syscall.Gettid())
	kid := fmt.Sprintf("; pid %d: %d ", child.Process.Pid, child.Process.Pid)
	main := fmt.Sprintf(" %d ", self) // the main thread, among the others
	if !strings.HasPrefix(got, self1) || !strings.Contains(got, main) || !strings.Contains(got, running) || !strings.Contains(got, kid) {
		t.Errorf("got %s\nwant %q, %q, %q and %q", got, self1, main, running, kid)
	}
	// A pid reused by another process is not described.
	if got := describeTree(self, start+1); !strings.Contains(got, "gone") {
		t.Errorf("other start time: %s", got)
	}
}
