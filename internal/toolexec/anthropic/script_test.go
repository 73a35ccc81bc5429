package anthropic

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// shell runs the session's shell (shellCmd) on this machine, as the
// sandbox runs it, and returns a function that runs one command through
// sessionScript and returns its output and status line.
func localShell(t *testing.T) func(command, nonce string) string {
	t.Helper()
	if _, err := os.Stat("/bin/bash"); err != nil {
		t.Skip("no /bin/bash")
	}
	cmd := exec.Command("/bin/bash", "-c", shellCmd)
	in, _ := cmd.StdinPipe()
	outR, outW := io.Pipe()
	cmd.Stdout = outW
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = in.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = outW.Close()
	})
	lines := make(chan string, 1000)
	go func() {
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	return func(command, nonce string) string {
		t.Helper()
		script, marker := sessionScript(command, nonce)
		if _, err := io.WriteString(in, script); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("the shell ended; output %q", out.String())
				}
				out.WriteString(l + "\n")
				if strings.HasPrefix(l, string(marker[1:])) {
					return out.String()
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("no marker; output %q", out.String())
			}
		}
	}
}

// TestSessionScriptHidesWhatFollows: a command the session's shell
// evaluates (or a file it sources, which the sandbox's code may have
// written) reads every descriptor the shell has; it finds neither the
// printf that carries its marker's nonce nor anything else of the
// session's input, so it cannot print the marker ahead of its end or
// swallow the real one. Before the script was one line, the shell's
// saved input (fd 10 or 11) held the printf line, nonce and all.
func TestSessionScriptHidesWhatFollows(t *testing.T) {
	run := localShell(t)
	thief := `for fd in $(ls /proc/$$/fd); do [ "$fd" -gt 2 ] || continue; ` +
		`while read -t 0.3 -r -u "$fd" line 2>/dev/null; do echo "fd$fd: $line"; done; done; echo scanned`
	out := run(thief, "0123456789abcdef01234567")
	if strings.Contains(out, "fd") || !strings.HasPrefix(out, "scanned\n") {
		t.Fatalf("the command read the session's input: %q", out)
	}
	if !strings.HasSuffix(out, "__AIRLOCK_0123456789abcdef01234567__:0\n") {
		t.Fatalf("the marker is not the shell's: %q", out)
	}
	// A syntax error is the command's: the next command runs as usual.
	if out := run("echo 'unterminated", "n1"); !strings.Contains(out, "unexpected EOF") || !strings.HasSuffix(out, "__AIRLOCK_n1__:2\n") {
		t.Fatalf("syntax error: %q", out)
	}
	if out := run("echo still here", "n1b"); out != "still here\n\n__AIRLOCK_n1b__:0\n" {
		t.Fatalf("after a syntax error: %q", out)
	}
	// The session keeps its state from one command to the next.
	run("cd /tmp && X=kept", "n2")
	if out := run(`echo "$PWD $X"`, "n3"); !strings.HasPrefix(out, "/tmp kept\n") {
		t.Fatalf("state lost: %q", out)
	}
}

// TestMarkerScanTrickle: output that arrives a byte at a time (a
// sandbox's program can write it so) is searched for the marker once,
// not the whole kept tail again for each byte; the marker is found
// across chunks and after the tail was cut.
func TestMarkerScanTrickle(t *testing.T) {
	_, marker := sessionScript("true", "0123456789abcdef01234567")
	for _, max := range []int{1 << 20, minMaxOutputChars} {
		out := &capped{max: max}
		scan := &markerScan{marker: marker}
		feed := func(p []byte) int {
			out.tail = append(out.tail, p...)
			i := scan.find(out.tail)
			if i < 0 {
				kept := len(out.tail)
				out.trim(len(marker) + 16)
				scan.dropped(kept - len(out.tail))
			}
			return i
		}
		const n = 20_000
		for range n {
			if feed([]byte{'x'}) >= 0 {
				t.Fatal("a marker in x's")
			}
		}
		end := append(append([]byte(nil), marker...), "0\n"...)
		i := -1
		for _, c := range end {
			i = feed([]byte{c})
		}
		if i < 0 || string(out.tail[i:]) != string(end) {
			t.Fatalf("max %d: marker not found (%d)", max, i)
		}
		if limit := int64(n+len(end)) * int64(len(marker)+1); scan.scanned > limit {
			t.Fatalf("max %d: searched %d bytes for %d of output", max, scan.scanned, n+len(end))
		}
	}
}
