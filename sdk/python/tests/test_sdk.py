"""The Python SDK against a real daemon (AIRLOCK_URL, AIRLOCK_API_KEY: an
admin key). internal/e2e's TestPythonSDK starts one and runs this suite:

    python3 -m unittest discover -s sdk/python/tests -v

A step that needs what the sandbox may lack (matplotlib) skips, and
fails instead where AIRLOCK_TEST_NO_SKIP is set.
"""

from __future__ import annotations

import asyncio
import builtins
import hashlib
import io
import os
import resource
import time
import unittest
import uuid

import airlock

URL = os.environ.get("AIRLOCK_URL", "")
KEY = os.environ.get("AIRLOCK_API_KEY", "")
NO_SKIP = bool(os.environ.get("AIRLOCK_TEST_NO_SKIP"))

# A well-formed sandbox ID that no sandbox has.
MISSING = "sb-" + "a" * 16

# The shared sandbox of the tests that need one but not their own.
SB = ""
client: airlock.Client


def setUpModule() -> None:
    global SB, client
    if not URL or not KEY:
        raise unittest.SkipTest("AIRLOCK_URL and AIRLOCK_API_KEY name the daemon to test against")
    client = airlock.Client(timeout=30)
    SB = client.create_sandbox(metadata={"suite": "pysdk"}, timeout=600).id


def tearDownModule() -> None:
    if SB:
        client.delete_sandbox(SB)


def skip_or_fail(test: unittest.TestCase, why: str) -> None:
    if NO_SKIP:
        test.fail(why + " (AIRLOCK_TEST_NO_SKIP is set)")
    test.skipTest(why)


class GeneratedFile(io.RawIOBase):
    """A file-like object of size random bytes, made chunk by chunk as it
    is read (never held whole), hashing what it hands out."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.left = size
        self.sha = hashlib.sha256()
        self.reads = 0

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        if self.left <= 0:
            return b""
        if n is None or n < 0 or n > 1 << 20:
            n = 1 << 20
        b = os.urandom(min(n, self.left))
        self.left -= len(b)
        self.sha.update(b)
        self.reads += 1
        return b


def peak_rss_mib() -> float:
    """This process's peak RSS in MiB: VmHWM, the high-water mark of its
    own address space. getrusage's ru_maxrss would not do: Linux carries
    the parent's peak over an exec that shared its memory (a Go test
    binary's vfork), so it can start at gigabytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0  # kB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class TestSandboxes(unittest.TestCase):
    def test_lifecycle(self) -> None:
        tag = uuid.uuid4().hex
        sb = client.create_sandbox(metadata={"case": tag}, env={"GREETING": "hello"})
        try:
            self.assertTrue(sb.id)
            self.assertEqual(sb.state, "running")
            self.assertEqual(sb.metadata.get("case"), tag)
            self.assertIsNotNone(sb.created_at)
            self.assertIsNotNone(sb.created_at.tzinfo)
            got = client.get_sandbox(sb.id)
            self.assertEqual(got.id, sb.id)
            listed = client.list_sandboxes(metadata={"case": tag})
            self.assertEqual([s.id for s in listed], [sb.id])
            self.assertIn(sb.id, [s.id for s in client.list_sandboxes(states=["running"])])
            self.assertEqual(client.exec(sb.id, "echo $GREETING").stdout_text, "hello\n")
        finally:
            client.delete_sandbox(sb.id)
        gone = client.get_sandbox(sb.id)  # its record stays, stopped
        self.assertEqual((gone.state, gone.end_reason), ("stopped", "deleted"))
        self.assertNotIn(sb.id, [s.id for s in client.list_sandboxes(states=["running"])])
        with self.assertRaises(airlock.NotFoundError):
            client.get_sandbox(MISSING)

    def test_whoami_and_templates(self) -> None:
        me = client.whoami()
        self.assertIn("admin", me.scopes)
        self.assertTrue(me.tenant_id)
        tl = client.list_templates()
        self.assertTrue(tl.templates, "no template listed")
        name = tl.templates[0].name
        detail = client.get_template(name)
        self.assertEqual(detail.name, name)
        with self.assertRaises(airlock.NotFoundError):
            client.get_template("no-such-template-" + uuid.uuid4().hex[:8])


class TestExec(unittest.TestCase):
    def test_buffered(self) -> None:
        r = client.exec(SB, "cat; echo to-err >&2; exit 3", stdin="from stdin\n")
        self.assertEqual(r.status, "error")
        self.assertEqual(r.exit_code, 3)
        self.assertEqual(r.stdout, b"from stdin\n")
        self.assertEqual(r.stderr_text, "to-err\n")
        r = client.exec(SB, ["printf", "%s|%s", "a b", "c"])
        self.assertTrue(r.ok)
        self.assertEqual(r.stdout_text, "a b|c")
        r = client.exec(SB, ["head", "-c", "4", "/dev/zero"])
        self.assertEqual(r.stdout, b"\x00" * 4)

    def test_streamed(self) -> None:
        events = []
        with client.exec_stream(SB, "echo one; sleep 0.3; echo two >&2; sleep 0.3; echo three; exit 2") as s:
            for ev in s:
                events.append(ev)
        self.assertIsInstance(events[0], airlock.ExecStart, "the first event is not the start line")
        self.assertGreater(events[0].pid, 0)
        self.assertEqual(s.pid, events[0].pid)
        self.assertIsInstance(events[-1], airlock.ExecExit)
        self.assertEqual(events[-1].result.exit_code, 2)
        outs = [(e.stream, e.text) for e in events if isinstance(e, airlock.ExecOutput)]
        self.assertEqual("".join(t for st, t in outs if st == "stdout"), "one\nthree\n")
        self.assertEqual("".join(t for st, t in outs if st == "stderr"), "two\n")
        # The output came as it was written, not at the end: three chunks.
        self.assertGreaterEqual(len(outs), 3)

    def test_process_stdin_and_signal(self) -> None:
        s = client.exec_stream(SB, "cat", keep_stdin=True, tag="pysdk-cat", timeout=60)
        with s:
            start = next(s)
            self.assertIsInstance(start, airlock.ExecStart)
            procs = client.list_processes(SB)
            mine = [p for p in procs.processes if p.pid == start.pid]
            self.assertEqual(len(mine), 1, "the started process is not listed")
            self.assertEqual(mine[0].tag, "pysdk-cat")
            client.send_stdin(SB, start.pid, b"ping\n")
            client.send_stdin(SB, start.pid, "pong\n", close=True)
            res = s.wait()
        self.assertEqual(res.stdout_text, "ping\npong\n")
        self.assertEqual(res.exit_code, 0)
        s = client.exec_stream(SB, "sleep 30", timeout=60)
        with s:
            pid = next(s).pid
            client.signal_process(SB, pid, "KILL")
            res = s.wait()
        self.assertEqual(res.status, "killed")
        with self.assertRaises(airlock.NotFoundError):
            client.signal_process(SB, 999999, "TERM")

    def test_background_follow(self) -> None:
        s = client.exec_stream(SB, "sleep 1; echo late; sleep 0.2", background=True, timeout=30)
        pid = next(s).pid
        s.close()  # the process goes on
        follow = client.follow_process(SB, pid)
        res = follow.wait()
        self.assertEqual(res.exit_code, 0)
        self.assertEqual(res.stdout_text, "late\n")


class TestFiles(unittest.TestCase):
    SIZE = 100 << 20

    def test_big_file_streamed_both_ways(self) -> None:
        peak_before = peak_rss_mib()
        src = GeneratedFile(self.SIZE)
        t0 = time.monotonic()
        info = client.write_file(SB, "big.bin", src)
        up = time.monotonic() - t0
        peak_up = peak_rss_mib()
        want = src.sha.hexdigest()
        self.assertGreater(src.reads, 50, "the upload did not read the source in chunks")
        self.assertEqual(info.size, self.SIZE)
        self.assertEqual(info.sha256, want)
        r = client.exec(SB, "stat -c %s big.bin && sha256sum big.bin")
        size, digest = r.stdout_text.split("\n")[0], r.stdout_text.split("\n")[1].split()[0]
        self.assertEqual(int(size), self.SIZE)
        self.assertEqual(digest, want)
        self.assertEqual(client.stat_file(SB, "big.bin").size, self.SIZE)

        got = hashlib.sha256()
        n = 0
        t0 = time.monotonic()
        with client.read_file(SB, "big.bin") as f:
            for chunk in f.iter_chunks():
                self.assertLessEqual(len(chunk), 1 << 20)
                got.update(chunk)
                n += len(chunk)
        down = time.monotonic() - t0
        peak_down = peak_rss_mib()
        self.assertEqual(n, self.SIZE)
        self.assertEqual(got.hexdigest(), want)

        sink = HashingSink()
        self.assertEqual(client.read_file(SB, "big.bin", sink), self.SIZE)
        self.assertEqual(sink.sha.hexdigest(), want)

        peak = peak_rss_mib()
        print("\n    100 MiB: up %.2fs, down %.2fs; peak RSS of this process: %.1f MiB before, %.1f after the upload,"
              " %.1f after the download, %.1f at the end" % (up, down, peak_before, peak_up, peak_down, peak))
        self.assertLess(peak, 60, "the process's peak RSS says a 100 MiB transfer was held in memory")
        client.remove_file(SB, "big.bin")

    def test_small_operations(self) -> None:
        d = "work-" + uuid.uuid4().hex[:8]
        e = client.make_dir(SB, d + "/sub")
        self.assertEqual(e.type, "dir")
        w = client.watch_dir(SB, d, recursive=True, request_timeout=20)
        with w:
            info = client.write_file(SB, d + "/a.txt", b"alpha")
            self.assertEqual(info.sha256, hashlib.sha256(b"alpha").hexdigest())
            # The write goes to a temporary file renamed over a.txt at its end.
            seen = []
            for ev in w:
                seen.append(ev)
                if ev.path.endswith("/a.txt"):
                    break
                self.assertLess(len(seen), 20, seen)
            self.assertIn(seen[-1].op, ("create", "rename", "write"))
        client.write_file(SB, d + "/sub/b.txt", iter([b"be", "ta"]))
        self.assertEqual(client.read_bytes(SB, d + "/sub/b.txt"), b"beta")
        moved = client.move_file(SB, d + "/a.txt", d + "/c.txt")
        self.assertTrue(moved.path.endswith("/c.txt"))
        names = sorted(x.name for x in client.list_dir(SB, d, depth=2).entries)
        self.assertEqual(names, ["b.txt", "c.txt", "sub"])
        with self.assertRaises(airlock.NotFoundError):
            client.stat_file(SB, d + "/a.txt")
        with self.assertRaises(airlock.PermissionDeniedError):
            client.write_file(SB, "/etc/pysdk-denied", b"x")
        client.remove_file(SB, d, recursive=True)
        with self.assertRaises(airlock.NotFoundError):
            client.read_bytes(SB, d + "/c.txt")


class HashingSink(io.RawIOBase):
    def __init__(self) -> None:
        super().__init__()
        self.sha = hashlib.sha256()

    def writable(self) -> bool:
        return True

    def write(self, b: bytes) -> int:  # type: ignore[override]
        self.sha.update(b)
        return len(b)


class TestCode(unittest.TestCase):
    def test_context_state_and_chart(self) -> None:
        ctx = client.create_context(SB, "python")
        self.assertTrue(ctx.id.startswith("ctx-"))
        try:
            x = client.run_code(SB, "answer = 41\nprint('set')", context_id=ctx.id)
            self.assertEqual(x.status, "ok")
            self.assertEqual(x.stdout, "set\n")
            x = client.run_code(SB, "answer + 1", context_id=ctx.id)
            self.assertEqual(x.text, "42")
            self.assertEqual(x.execution_count, 2)
            x = client.run_code(SB, "1/0", context_id=ctx.id)
            self.assertEqual(x.status, "error")
            self.assertEqual(x.error.name, "ZeroDivisionError")

            events = list(client.run_code_stream(SB, "print('a')\nanswer * 2", context_id=ctx.id))
            self.assertIsInstance(events[0], airlock.CodeOutput)
            self.assertIsInstance(events[-1], airlock.CodeExecution)
            self.assertEqual(events[-1].text, "82")

            probe = client.run_code(SB, "import importlib.util\nimportlib.util.find_spec('matplotlib') is not None",
                                    context_id=ctx.id)
            if probe.text != "True":
                skip_or_fail(self, "matplotlib is not in the sandbox")
            x = client.run_code(SB, "import matplotlib.pyplot as plt\n"
                                    "fig, ax = plt.subplots(figsize=(4, 3), dpi=80)\n"
                                    "ax.plot([answer, 1, 2])\nplt.show()", context_id=ctx.id, timeout=120)
            self.assertEqual(x.status, "ok", x.error)
            pngs = [r.png for r in x.results if r.png]
            self.assertEqual(len(pngs), 1, "no PNG result: %r" % x.results)
            self.assertTrue(pngs[0].startswith(b"\x89PNG\r\n\x1a\n"))
            self.assertGreater(len(pngs[0]), 1000)
        finally:
            client.delete_context(SB, ctx.id)
        self.assertNotIn(ctx.id, [c.id for c in client.list_contexts(SB)])


class TestErrors(unittest.TestCase):
    def test_typed_exceptions(self) -> None:
        with self.assertRaises(airlock.NotFoundError) as cm:
            client.get_sandbox(MISSING)
        self.assertEqual((cm.exception.status, cm.exception.code), (404, "not_found"))
        self.assertIsInstance(cm.exception, airlock.AirlockError)
        with self.assertRaises(airlock.NotFoundError):
            client.exec(MISSING, "true")
        with self.assertRaises(airlock.InvalidArgumentError) as ce:
            client.exec(SB, "true", timeout=100000)
        self.assertEqual((ce.exception.status, ce.exception.code), (400, "invalid_argument"))
        with self.assertRaises(airlock.InvalidArgumentError):
            client.create_sandbox(limits={"memory_mb": -5})
        with self.assertRaises(airlock.InvalidArgumentError):
            client.get_sandbox("sb-malformed")  # refused by the server
        with self.assertRaises(airlock.InvalidArgumentError):
            client.get_sandbox("a/b")  # refused by the client itself
        with self.assertRaises(airlock.UnauthenticatedError):
            airlock.Client(api_key="not-a-key").list_sandboxes()

    def test_scope_denied(self) -> None:
        k = client.create_key("pysdk-readonly-" + uuid.uuid4().hex[:6], ["sandboxes:read"])
        try:
            self.assertTrue(k.key)
            limited = airlock.Client(api_key=k.key)
            self.assertEqual(limited.whoami().scopes, ["sandboxes:read"])
            self.assertIn(SB, [s.id for s in limited.list_sandboxes()])
            with self.assertRaises(airlock.PermissionDeniedError) as cm:
                limited.create_sandbox()
            self.assertEqual((cm.exception.status, cm.exception.code), (403, "permission_denied"))
            with self.assertRaises(airlock.PermissionDeniedError):
                limited.exec(SB, "true")
        finally:
            client.revoke_key(k.id)
        with self.assertRaises(airlock.UnauthenticatedError):
            airlock.Client(api_key=k.key).list_sandboxes()


class TestTimeouts(unittest.TestCase):
    def test_command_timeout(self) -> None:
        t0 = time.monotonic()
        r = client.exec(SB, "echo started; sleep 30", timeout=1)
        self.assertLess(time.monotonic() - t0, 15)
        self.assertEqual(r.status, "timeout")
        self.assertEqual(r.stdout_text, "started\n")
        s = client.exec_stream(SB, "sleep 30", timeout=1)
        self.assertEqual(s.wait().status, "timeout")

    def test_request_timeout(self) -> None:
        t0 = time.monotonic()
        with self.assertRaises(airlock.TimeoutError) as cm:
            client.exec(SB, "sleep 5", request_timeout=1)
        self.assertLess(time.monotonic() - t0, 4)
        self.assertIsNone(cm.exception.status)
        self.assertIsInstance(cm.exception, builtins.TimeoutError)
        slow = airlock.Client(timeout=0.5)
        with self.assertRaises(airlock.TimeoutError):
            with slow.exec_stream(SB, "sleep 3", request_timeout=0.5) as s:
                s.wait()


class TestRun(unittest.TestCase):
    def test_caller_tools(self) -> None:
        schema = {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                  "required": ["a", "b"], "additionalProperties": False}
        client.create_tool("pysdk_add", input_schema=schema, upstream={"kind": "caller"})
        client.create_tool("pysdk_fail", input_schema={"type": "object"}, upstream={"kind": "caller"})
        try:
            self.assertIn("pysdk_add", [t.name for t in client.list_tools()])
            seen = []

            def add(args):
                seen.append(args)
                return {"sum": args["a"] + args["b"]}

            def fail(args):
                raise RuntimeError("no budget today")

            program = ("from tools import pysdk_add, pysdk_fail\n"
                       "print(pysdk_add(a=2, b=3)['sum'])\n"
                       "try:\n    pysdk_fail()\nexcept Exception as e:\n    print('caught', e)\n")
            traces = []
            res = client.run_once(program, tools={"pysdk_add": add, "pysdk_fail": fail}, timeout=60,
                                  on_tool_call=traces.append)
            self.assertEqual(res.exit_code, 0, res.stderr_text)
            lines = res.stdout_text.splitlines()
            self.assertEqual(lines[0], "5")
            self.assertTrue(lines[1].startswith("caught") and "no budget today" in lines[1], lines)
            self.assertEqual(seen, [{"a": 2, "b": 3}])
            self.assertTrue(res.sandbox_id)
            self.assertEqual(sorted(t.outcome for t in res.tool_calls), ["error", "ok"])
            self.assertEqual(len(traces), 2)
            try:  # the program's sandbox is gone
                self.assertNotEqual(client.get_sandbox(res.sandbox_id).state, "running")
            except airlock.NotFoundError:
                pass
        finally:
            client.delete_tool("pysdk_add")
            client.delete_tool("pysdk_fail")


class TestAsync(unittest.TestCase):
    def test_async_client(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        async with airlock.AsyncClient(timeout=30) as ac:
            sb = await ac.create_sandbox(metadata={"suite": "pysdk-async"})
            try:
                t0 = time.monotonic()
                results = await asyncio.gather(*[ac.exec(sb.id, "sleep 1; echo %d" % i) for i in range(4)])
                elapsed = time.monotonic() - t0
                self.assertEqual([r.stdout_text for r in results], ["%d\n" % i for i in range(4)])
                self.assertLess(elapsed, 3.5, "the execs did not run concurrently")

                s = await ac.exec_stream(sb.id, "echo a; echo b >&2")
                events = [ev async for ev in s]
                self.assertIsInstance(events[0], airlock.ExecStart)
                self.assertIsInstance(events[-1], airlock.ExecExit)

                async def chunks():
                    for part in (b"as", b"ync"):
                        yield part
                info = await ac.write_file(sb.id, "a.txt", chunks())
                self.assertEqual(info.size, 5)
                async with await ac.read_file(sb.id, "a.txt") as f:
                    got = b"".join([c async for c in f.iter_chunks()])
                self.assertEqual(got, b"async")
                x = await ac.run_code(sb.id, "6 * 7")
                self.assertEqual(x.text, "42")
                with self.assertRaises(airlock.NotFoundError):
                    await ac.get_sandbox(MISSING)
                with self.assertRaises(airlock.TimeoutError):
                    await ac.exec(sb.id, "sleep 3", request_timeout=0.5)
            finally:
                await ac.delete_sandbox(sb.id)


class TestStats(unittest.TestCase):
    def test_sample_stream_and_errors(self) -> None:
        busy = client.exec_stream(SB, ["sh", "-c", "while :; do :; done"], background=True, timeout=20, tag="busy")
        pid = next(busy).pid
        busy.close()  # the loop goes on in the background
        try:
            s = client.stats(SB, interval_ms=500)
            self.assertIsInstance(s, airlock.SandboxStats)
            self.assertEqual(s.sandbox_id, SB)
            self.assertIsNotNone(s.time)
            self.assertTrue(450 <= s.interval_ms < 5000, s.interval_ms)
            self.assertGreater(s.cpu.rate, 0.3, "cpu.rate with a busy loop")
            self.assertGreater(s.cpu.usage_s, 0)
            self.assertGreater(s.cpu.limit, 0)
            self.assertGreater(s.memory.current_bytes, 0)
            self.assertGreaterEqual(s.memory.peak_bytes, s.memory.current_bytes)
            self.assertGreater(s.memory.limit_bytes, 0)
            self.assertGreaterEqual(s.pids.current, 2)
            self.assertGreater(s.pids.limit, 0)
            self.assertIsInstance(s.disk.used_bytes, int)
            self.assertIsNone(s.network)  # mode none
            self.assertIn("no network", s.network_absent)

            # A stream: three samples 200 ms apart, then close() ends it.
            t0 = time.monotonic()
            samples = []
            with client.stream_stats(SB, interval_ms=200) as st:
                for x in st:
                    samples.append(x)
                    if len(samples) == 3:
                        break
            self.assertLess(time.monotonic() - t0, 3.0)
            self.assertEqual(len(samples), 3)
            for x in samples:
                self.assertEqual(x.sandbox_id, SB)
                self.assertTrue(150 <= x.interval_ms < 2000, x.interval_ms)
                self.assertGreater(x.memory.current_bytes, 0)
            self.assertTrue(samples[0].time < samples[1].time < samples[2].time)
            self.assertGreater(samples[2].cpu.usage_s, samples[0].cpu.usage_s)
            self.assertEqual(list(st), [])  # closed: nothing more
        finally:
            client.signal_process(SB, pid, "KILL")

        with self.assertRaises(airlock.NotFoundError):
            client.stats(MISSING, interval_ms=100)
        with self.assertRaises(airlock.NotFoundError):
            client.stream_stats(MISSING)
        for bad in (5, 1.5, 60001):
            with self.assertRaises(airlock.InvalidArgumentError):
                client.stats(SB, interval_ms=bad)
            with self.assertRaises(airlock.InvalidArgumentError):
                client.stream_stats(SB, interval_ms=bad)

    def test_stream_ends_with_the_sandbox_and_async(self) -> None:
        sb = client.create_sandbox(metadata={"suite": "pysdk"}, timeout=120)
        try:
            st = client.stream_stats(sb.id, interval_ms=200, request_timeout=10)
            self.assertEqual(next(st).sandbox_id, sb.id)

            async def main() -> None:
                async with airlock.AsyncClient(timeout=30) as ac:
                    one = await ac.stats(sb.id, interval_ms=100)
                    self.assertEqual(one.sandbox_id, sb.id)
                    got = []
                    async with await ac.stream_stats(sb.id, interval_ms=200) as ast:
                        async for x in ast:
                            got.append(x)
                            if len(got) == 2:
                                break
                    self.assertEqual([x.sandbox_id for x in got], [sb.id, sb.id])
                    with self.assertRaises(airlock.NotFoundError):
                        await ac.stats(MISSING)
            asyncio.run(main())
        finally:
            client.delete_sandbox(sb.id)
        # The sandbox ended: so does its stream, without an error.
        rest = list(st)
        self.assertLessEqual(len(rest), 15)
        # A sandbox that ended has no stats (or, once forgotten, no sandbox).
        with self.assertRaises((airlock.FailedPreconditionError, airlock.NotFoundError)):
            client.stats(sb.id, interval_ms=100)


if __name__ == "__main__":
    unittest.main()
