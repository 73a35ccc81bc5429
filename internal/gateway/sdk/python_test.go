package sdk

import (
	"strings"
	"testing"
	"time"
)

// pyPrelude starts every Python script: the module as a sandbox's code
// imports it.
const pyPrelude = `import asyncio, json, os, subprocess, sys, time
import tools
`

// TestPython runs python/tools.py, as WriteDir places it, with the real
// interpreter against the fake gateway.
func TestPython(t *testing.T) {
	py := requireInterpreter(t, "python3")
	cases := []struct{ name, src string }{
		{"call", `
r = tools.call("echo", text="hi", count=2, tags=["a"], meta={"k": None})
assert r == {"tool": "echo", "args": {"text": "hi", "count": 2, "tags": ["a"], "meta": {"k": None}}}, r
# An argument named like call's own parameter still reaches the tool.
assert tools.call("echo", name="n")["args"] == {"name": "n"}
assert tools.invoke("echo", {"text": "x"}, timeout=5) == {"tool": "echo", "args": {"text": "x"}}
assert tools.call("sleep") == {"slept": True}
print("ok")
`},
		{"errors", `
want = {
    "invalid_argument": tools.InvalidArguments, "permission_denied": tools.PermissionDenied,
    "not_found": tools.NotFound, "failed_precondition": tools.FailedPrecondition,
    "resource_exhausted": tools.BudgetExceeded, "rate_limited": tools.RateLimited,
    "canceled": tools.Canceled, "internal": tools.InternalError,
    "unavailable": tools.Unavailable, "timeout": tools.Timeout, "teapot": tools.ToolError,
}
codes = ` + "CODES" + `
assert sorted(codes) == sorted(want), codes
for code in codes:
    try:
        tools.call("fail", code=code)
    except tools.ToolError as e:
        assert type(e) is want[code], (code, type(e))
        assert e.code == code and e.message == "refused: " + code, (e.code, e.message)
        assert str(e) == code + ": refused: " + code, str(e)
    else:
        raise AssertionError("no error for " + code)
assert issubclass(tools.RateLimited, tools.BudgetExceeded)
# A tool not granted.
try:
    tools.call("nope")
except tools.PermissionDenied as e:
    assert "not granted" in e.message
else:
    raise AssertionError("nope succeeded")
# Answers the module cannot read are internal errors, never a result.
for name in ("garbage", "bare"):
    try:
        tools.call(name)
    except tools.InternalError:
        pass
    else:
        raise AssertionError(name + " succeeded")
for bad in ([1], "x", 3):
    try:
        tools.invoke("echo", bad)
    except TypeError:
        pass
    else:
        raise AssertionError("invoke took %r" % (bad,))
try:
    tools.call("echo", text=float("nan"))
except ValueError:
    pass
else:
    raise AssertionError("NaN was sent: it is not JSON")
print("ok")
`},
		{"import", `
from tools import echo, sleep
assert echo(text="a") == {"tool": "echo", "args": {"text": "a"}}
assert echo.__name__ == "echo" and echo.__doc__ == "Echo the arguments back."
import inspect
sig = inspect.signature(echo)
assert list(sig.parameters)[0] == "text" and sig.parameters["text"].default is inspect.Parameter.empty, sig
assert tools.echo(text="b")["args"] == {"text": "b"}
assert "echo" in dir(tools)
try:
    from tools import not_granted
except ImportError as e:
    assert "not_granted" in str(e), e
else:
    raise AssertionError("imported a tool that is not granted")
assert not hasattr(tools, "_private")
# A tool named like a module tools.py imports is the tool.
from tools import time as time_tool
assert time_tool() == {"tool": "time", "args": {}}
assert tools.keyword_args(**{"from": "x"})["args"] == {"from": "x"}
# The granted list is fetched once, then cached until refresh().
names = [t["name"] for t in tools.list_tools()]
assert names[:3] == ["echo", "sleep", "fail"], names
tools.refresh()
assert asyncio.run(echo.acall(text="c"))["args"] == {"text": "c"}
print("ok")
`},
		{"threads", `
from concurrent.futures import ThreadPoolExecutor
start = time.monotonic()
with ThreadPoolExecutor(100) as ex:
    results = list(ex.map(lambda i: tools.call("sleep"), range(100)))
took = time.monotonic() - start
assert results == [{"slept": True}] * 100
# 100 calls of 100 ms in turn take 10 s.
assert took < 3, took
print("threads %.3f s" % took)
print("ok")
`},
		{"asyncio", `
async def main():
    return await asyncio.gather(*(tools.acall("sleep") for _ in range(100)))
start = time.monotonic()
results = asyncio.run(main())
took = time.monotonic() - start
assert results == [{"slept": True}] * 100
assert took < 3, took
print("asyncio %.3f s" % took)
print("ok")
`},
		{"stubs", `
s = tools.stubs()
for want in [
    'def echo(*, text: str, count: int = ..., ratio: float = ..., flag: bool = ..., tags: List[str] = ..., meta: Dict[str, Any] = ..., level: Literal[\'low\', \'high\'] = ..., note: Optional[str] = ...) -> Dict[str, Any]:',
    '    """Echo the arguments back."""',
    'def fail(*, code: str) -> Any:',
    'def sleep(**args: Any) -> Any:',
    'def keyword_args(**args: Any) -> Any:',
    'def call(name: str, /, **args: Any) -> Any: ...',
    'class PermissionDenied(ToolError): ...',
    'class RateLimited(BudgetExceeded): ...',
]:
    assert want in s.splitlines(), "stubs lack %r:\n%s" % (want, s)
# The stubs are valid Python.
compile(s, "tools.pyi", "exec")
out = subprocess.run([sys.executable, "-m", "tools", "--stubs"], capture_output=True, text=True, check=True).stdout
assert out == s, out
assert "def time(**args: Any) -> Any:" in s.splitlines()
out = subprocess.run([sys.executable, "-m", "tools", "--list"], capture_output=True, text=True, check=True).stdout
assert out.splitlines()[0] == "echo\tEcho the arguments back.", out
r = subprocess.run([sys.executable, "-m", "tools"], capture_output=True, text=True)
assert r.returncode == 2 and "usage" in r.stderr, r
print("ok")
`},
		{"fork", `
# A forked child gets connections of its own, not its parent's kept one.
assert tools.call("echo", text="before")["args"] == {"text": "before"}
pid = os.fork()
who = "child" if pid == 0 else "parent"
try:
    for i in range(100):
        got = tools.call("echo", text="%s %d" % (who, i))
        assert got["args"] == {"text": "%s %d" % (who, i)}, got
except BaseException as e:
    print(who, "failed:", repr(e), file=sys.stderr)
    if pid == 0:
        os._exit(1)
    raise
if pid == 0:
    os._exit(0)
_, status = os.waitpid(pid, 0)
assert status == 0, "the child failed"
print("ok")
`},
		{"timeout", `
start = time.monotonic()
try:
    tools.invoke("hang", {}, timeout=0.3)
except tools.Timeout as e:
    assert e.code == "timeout"
else:
    raise AssertionError("hang returned")
assert time.monotonic() - start < 3
os.environ["AIRLOCK_TOOLS_TIMEOUT"] = "0.3"
try:
    tools.call("hang")
except tools.Timeout:
    pass
else:
    raise AssertionError("hang returned")
print("ok")
`},
		{"limits", `
try:
    tools.call("big")
except tools.BudgetExceeded as e:
    assert "over 16777216 bytes" in e.message, e.message
else:
    raise AssertionError("a 17 MiB answer was read")
# The connection is not reused after a failed read: the next call works.
assert tools.call("echo", text="after")["args"] == {"text": "after"}
print("ok")
`},
		{"unreachable", `
import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
os.environ["AIRLOCK_TOOLS_URL"] = "http://127.0.0.1:%d" % port
try:
    tools.call("echo", text="x")
except tools.Unavailable as e:
    assert "cannot reach the tool gateway" in e.message, e.message
else:
    raise AssertionError("a call without a gateway succeeded")
os.environ["AIRLOCK_TOOLS_URL"] = "https://127.0.0.1:1"
try:
    tools.call("echo", text="x")
except tools.ToolError as e:
    assert "http://" in e.message
else:
    raise AssertionError("an https URL was taken")
print("ok")
`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newSDKEnv(t, 0)
			src := pyPrelude + strings.ReplaceAll(c.src, "CODES", codesJSON(t))
			e.script(t, py, "case_"+c.name+".py", src)
			checkConcurrency(t, c.name, e.gw)
		})
	}

	// Connections are kept and reused: 50 calls in turn open one.
	t.Run("reuse", func(t *testing.T) {
		e := newSDKEnv(t, 0)
		e.script(t, py, "reuse.py", pyPrelude+`
for i in range(50):
    assert tools.call("echo", text=str(i))["args"] == {"text": str(i)}
print("ok")
`)
		if n := e.gw.conns.Load(); n != 1 {
			t.Errorf("50 calls in turn opened %d connections, want 1", n)
		}
	})

	// A kept connection the gateway closed while idle is noticed and
	// replaced, not failed on.
	t.Run("idle close", func(t *testing.T) {
		e := newSDKEnv(t, 50*time.Millisecond)
		e.script(t, py, "idle.py", pyPrelude+`
for i in range(5):
    assert tools.call("echo", text=str(i))["args"] == {"text": str(i)}
    time.sleep(0.2)
print("ok")
`)
		if n := e.gw.conns.Load(); n != 5 {
			t.Errorf("5 calls 200 ms apart with a 50 ms idle timeout opened %d connections, want 5", n)
		}
		// Where the close is not seen before sending (the race the
		// check above narrows), the send fails and goes on a new
		// connection.
		e.script(t, py, "idle_race.py", pyPrelude+`
tools._still_open = lambda conn: True
for i in range(3):
    assert tools.call("echo", text=str(i))["args"] == {"text": str(i)}
    time.sleep(0.2)
print("ok")
`)
	})
}
