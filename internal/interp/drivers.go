package interp

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
)

// The kernel drivers: small programs that use only their language's
// standard library. They are passed to the interpreter on its command line
// (`python3 -c`, `node -e`, `bash -c`) rather than written into the
// sandbox: nothing has to be copied per context, sandboxed code cannot
// alter a driver file another context will start from, and read-only or
// full root filesystems work the same.
//
// Protocol. The daemon starts the driver as a background process with an
// open stdin and the environment variables AIRLOCK_INTERP_MAX_OUTPUT
// (characters of stdout plus stderr per cell), AIRLOCK_INTERP_MAX_TEXT
// (characters per text field of a result) and AIRLOCK_INTERP_MAX_IMAGE
// (bytes per image), which the driver removes from its environment before
// running any cell. The first line on stdin is the nonce (random, per
// process, lowercase hex); the driver sends nothing before it has read it.
// The nonce is never in the environment: /proc/PID/environ shows the
// environment a process started with, whatever it removes later.
//
// Commands follow on the driver's stdin, one per cell. For javascript a JSON
// line {"id":N,"code":"...","env":{...}}. For python a line
// "N COUNT CODELEN", COUNT times a line "KEYLEN VALUELEN" followed by the
// key and the value, then the code (lengths in bytes): the driver parses
// it without the json module, whose import would slow every start. For
// bash a line "N COUNT", COUNT "NAME=VALUE" strings each ended by a NUL
// byte, then the code ended by a NUL byte (bash cannot parse JSON; NUL
// cannot occur in code or values, the API refuses it).
//
// Frames come back on the process's stdout and stderr as
// "\x1e" NONCE " " JSON "\n"; anything else on those streams is raw
// output of the cell (stdout, stderr). Frame types:
//
//	{"t":"ready","lang":L,"version":V,"pid":P}  once, when the driver serves
//	{"t":"stdout"|"stderr","d":TEXT}             output the driver captured
//	{"t":"result","id":N,"main":B,"data":{MIME:VALUE,...}}
//	{"t":"error","id":N,"name":S,"value":S,"traceback":S}
//	{"t":"end","id":N,"truncated":B[,"code":EXIT]}  on stdout AND stderr
//
// A cell is over when its end frame has arrived on both streams, so that
// raw output written before the end is never attributed to the next cell.
// The Python driver redirects fds 1 and 2 into pipes it reads and writes
// frames to private duplicates of the original ones: nothing the cell
// writes, at any level, can break a frame, and stdout and stderr keep
// their relative order. The JavaScript driver replaces process.stdout,
// process.stderr and console; child processes that inherit fds 1 and 2
// write raw output. The bash driver leaves output raw.
//
// Only one who knows the nonce can forge a frame. It is in no process's
// environment, and no descriptor a cell's child inherits carries it: the
// command pipe (which the bash and JavaScript drivers let children
// inherit) held it only as its first line, read before any cell runs, and
// the Python driver's own descriptors are close-on-exec. What the nonce does not stop is the cell itself: it runs
// in the driver's process (bash's cell even in its shell), so it can find
// the nonce in the driver's memory and write frames, as could any process
// of the sandbox able to read that memory (/proc/PID/mem of a process
// with the same uid). That is no more than a cell can do with display(),
// and the sandbox may replace the interpreter anyway: the daemon treats
// every frame as untrusted input (size caps, cell ids checked). The nonce
// keeps what a cell prints or reads, and what its programs write, from
// being taken for frames.

//go:embed drivers/python.py
var pythonDriver string

//go:embed drivers/node.js
var nodeDriver string

//go:embed drivers/bash.sh
var bashDriver string

// driver describes how to run one language's driver.
type driver struct {
	// argv starts the driver (argv[0] is looked up in the sandbox's PATH).
	argv []string
	// command encodes one cell for the driver's stdin.
	command func(id uint64, code string, env map[string]string) ([]byte, error)
}

var drivers = map[Language]driver{
	Python: {
		argv:    []string{"python3", "-c", pythonDriver},
		command: lengthCommand,
	},
	JavaScript: {
		argv:    []string{"node", "--expose-internals", "-e", nodeDriver},
		command: jsonCommand,
	},
	Bash: {
		argv:    []string{"bash", "--noprofile", "--norc", "-c", bashDriver},
		command: bashCommand,
	},
}

// interpreterName is the program a language needs, for error messages.
func interpreterName(l Language) string {
	return drivers[l].argv[0]
}

func jsonCommand(id uint64, code string, env map[string]string) ([]byte, error) {
	b, err := json.Marshal(struct {
		ID   uint64            `json:"id"`
		Code string            `json:"code"`
		Env  map[string]string `json:"env,omitempty"`
	}{id, code, env})
	if err != nil {
		return nil, fmt.Errorf("encode cell: %w", err)
	}
	return append(b, '\n'), nil
}

func lengthCommand(id uint64, code string, env map[string]string) ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%d %d %d\n", id, len(env), len(code))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		fmt.Fprintf(&b, "%d %d\n%s%s", len(k), len(env[k]), k, env[k])
	}
	b.WriteString(code)
	return b.Bytes(), nil
}

func bashCommand(id uint64, code string, env map[string]string) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(strconv.FormatUint(id, 10))
	b.WriteByte(' ')
	b.WriteString(strconv.Itoa(len(env)))
	b.WriteByte('\n')
	for _, k := range slices.Sorted(maps.Keys(env)) {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(env[k])
		b.WriteByte(0)
	}
	b.WriteString(code)
	b.WriteByte(0)
	return b.Bytes(), nil
}
