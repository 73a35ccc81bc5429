package interp

import (
	"fmt"
	"strings"
	"testing"
)

// noncePattern is what a probe takes for a candidate nonce: a 16-digit
// lowercase hex string anywhere in what it read.
const noncePattern = "[0-9a-f]{16}"

// nonceProbes are cells that look for their kernel's nonce everywhere
// outside the driver's own memory — the environment the language shows,
// /proc/self/environ, /proc/KERNEL/environ and cmdline, and a child
// process's environment and /proc/self/environ — print all of it, and then
// write a result frame with every candidate (and the extra one the test
// puts in place of %[1]q) to every descriptor the kernel and a child of
// it have, for the cell's own id.
var nonceProbes = map[Language]string{
	Python: `import os, re, subprocess, sys
cid = int(sys._getframe().f_code.co_filename[len("<cell-"):-1])
seen = ["os.environ:" + repr(dict(os.environ))]
for p in ("/proc/self/environ", "/proc/%%d/environ" %% os.getpid(), "/proc/%%d/cmdline" %% os.getpid()):
    try:
        seen.append(p + ":" + open(p, "rb").read().decode("latin-1"))
    except OSError as e:
        seen.append(p + ":" + repr(e))
seen.append("child:" + subprocess.run(["sh", "-c", "env; cat /proc/self/environ"], capture_output=True).stdout.decode("latin-1"))
text = "\n".join(seen).replace("\0", "\n")
print(text)
for n in sorted(set(re.findall(r"` + noncePattern + `", text)) | {%[1]q} - {""}):
    frame = '\x1e%%s {"t":"result","id":%%d,"main":false,"data":{"text/plain":"FORGED"}}\n' %% (n, cid)
    for fd in range(1, 64):
        try:
            os.write(fd, frame.encode())
        except OSError:
            pass
    subprocess.run(["sh", "-c", 'for fd in 1 2 3 4 5 6 7 8 9 10 11 12; do [ -e /proc/$$/fd/$fd ] && printf "%%s" "$F" >&$fd; done'], env=dict(os.environ, F=frame))
`,
	JavaScript: `(() => {
const fs = require('fs'), cp = require('child_process');
const cid = Number(new Error().stack.match(/cell-(\d+)/)[1]);
const seen = ['process.env:' + JSON.stringify(process.env)];
for (const p of ['/proc/self/environ', '/proc/' + process.pid + '/environ', '/proc/' + process.pid + '/cmdline']) {
  try { seen.push(p + ':' + fs.readFileSync(p, 'latin1')); } catch (e) { seen.push(p + ':' + e); }
}
seen.push('child:' + cp.execSync('env; cat /proc/self/environ').toString('latin1'));
const text = seen.join('\n').split('\0').join('\n');
console.log(text);
const cands = new Set(text.match(/` + noncePattern + `/g) || []);
if (%[1]q) cands.add(%[1]q);
for (const n of cands) {
  const frame = '\x1e' + n + ' {"t":"result","id":' + cid + ',"main":false,"data":{"text/plain":"FORGED"}}\n';
  for (const fd of [1, 2]) fs.writeSync(fd, frame);
  cp.spawnSync('sh', ['-c', 'for fd in 1 2 3 4 5 6 7 8 9 10 11 12; do [ -e /proc/$$/fd/$fd ] && printf "%%s" "$F" >&$fd; done'],
    { stdio: 'inherit', env: Object.assign({}, process.env, { F: frame }) });
}
})();
`,
	Bash: `seen=$( { echo "env:"; env; echo "/proc/self/environ:"; cat /proc/self/environ; echo "/proc/$$/environ:"; cat /proc/$$/environ
  echo "/proc/$$/cmdline:"; cat /proc/$$/cmdline; echo "child:"; bash -c 'env; cat /proc/self/environ'; } | tr '\0' '\n')
printf '%%s\n' "$seen"
for n in $( { printf '%%s\n' "$seen" | grep -oE '` + noncePattern + `'; echo %[1]q; } | sort -u); do
  frame=$(printf '\036%%s {"t":"result","id":%%s,"main":false,"data":{"text/plain":"FORGED"}}' "$n" "$__airlock_id")
  printf '%%s\n' "$frame"
  printf '%%s\n' "$frame" >&2
  F="$frame" sh -c 'for fd in 1 2 3 4 5 6 7 8 9 10 11 12; do [ -e /proc/$$/fd/$fd ] && printf "%%s\n" "$F" >&$fd; done'
done
`,
}

// kernelNonce returns the nonce of the running default kernel of lang in
// sandbox id.
func (e *testEnv) kernelNonce(id string, lang Language) string {
	e.t.Helper()
	e.m.mu.Lock()
	b := e.m.boxes[id]
	e.m.mu.Unlock()
	if b == nil {
		e.t.Fatalf("no contexts in %s", id)
	}
	b.mu.Lock()
	c := b.defaults[lang]
	b.mu.Unlock()
	if c == nil {
		e.t.Fatalf("no default %s context", lang)
	}
	c.mu.Lock()
	k := c.k
	c.mu.Unlock()
	if k == nil {
		e.t.Fatalf("the %s context has no kernel", lang)
	}
	marker := string(k.chans[0].sp.marker) // "\x1e" NONCE " "
	return marker[1 : len(marker)-1]
}

// TestCellCannotForgeFrames checks, for each language, that a cell finds
// its kernel's nonce in no environment, /proc file or child it can reach,
// and that frames it writes everywhere with what it found are not taken
// for results. A control cell given the real nonce shows that the same
// writes would forge a result.
func TestCellCannotForgeFrames(t *testing.T) {
	for _, lang := range []Language{Python, JavaScript, Bash} {
		t.Run(string(lang), func(t *testing.T) {
			need(t, lang)
			e := newEnv(t, Limits{})
			id := e.sandbox()
			sixBySeven := func(what string) {
				t.Helper()
				code := map[Language]string{Python: "6*7", JavaScript: "6*7", Bash: "echo $((6*7))"}[lang]
				if o := e.run(id, RunRequest{Language: lang, Code: code}); o.main() != "42" && o.stdout != "42\n" {
					t.Fatalf("%s: %+v", what, o)
				}
			}
			sixBySeven("first cell")
			nonce := e.kernelNonce(id, lang)
			if len(nonce) != 16 {
				t.Fatalf("nonce %q", nonce)
			}

			o := e.run(id, RunRequest{Language: lang, Code: fmt.Sprintf(nonceProbes[lang], "")})
			out := o.stdout + o.stderr
			if !strings.Contains(out, "SANDBOX_VAR=from-sandbox") || !strings.Contains(out, "/environ:") || !strings.Contains(out, "child:") {
				t.Fatalf("the probe did not read the environments: %+v %+v", o, o.err)
			}
			if strings.Contains(out, nonce) {
				t.Errorf("the cell read the nonce %s:\n%s", nonce, out)
			}
			for _, r := range o.results {
				if strings.Contains(r.Text, "FORGED") {
					t.Errorf("a forged result was accepted: %+v", r)
				}
			}
			if o.end.Status != StatusOK {
				t.Errorf("probe: %+v %+v", o.end, o.err)
			}

			// Control: with the nonce the same writes forge a result, so
			// the probe above would have caught a leak.
			o = e.run(id, RunRequest{Language: lang, Code: fmt.Sprintf(nonceProbes[lang], nonce)})
			forged := 0
			for _, r := range o.results {
				if strings.Contains(r.Text, "FORGED") {
					forged++
				}
			}
			if forged == 0 {
				t.Errorf("control: no forged result with the real nonce: %+v %+v", o, o.err)
			}
			sixBySeven("after the probes")
		})
	}
}
