"""The synchronous client."""

from __future__ import annotations

import concurrent.futures
import io
import json
import os
import threading
from typing import (Any, BinaryIO, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union,
                    overload)

from . import errors
from ._http import CHUNK_SIZE, Response, Transport, check_id, path_escape, stream_error
from .models import (Approval, CodeContext, CodeError, CodeEvent, CodeExecution, CodeOutput, CodeResult,
                     CreatedKey, DirListing, ExecEvent, ExecExit, ExecOutput, ExecResult, ExecStart, FileInfo,
                     Key, ProcessList, RunResult, Sandbox, SandboxStats, Template, TemplateDetail, TemplateList,
                     Tool, ToolCallTrace, ToolRequest, Toolset, WatchEvent, WhoAmI, b64)

__all__ = ["Client", "ExecStream", "CodeStream", "WatchStream", "StatsStream", "FileReader", "ToolFunc",
           "DEFAULT_TIMEOUT"]

DEFAULT_TIMEOUT = 60.0
"""Seconds the client waits to connect, and then for each read or write,
unless a call says otherwise."""

# Added to a command's own timeout to bound the wait for its answer.
_EXEC_MARGIN = 30.0
_DEFAULT_EXEC_TIMEOUT = 60

# The longest a file watch may run on the server (its exec time limit).
_WATCH_TIMEOUT = 3600.0 + _EXEC_MARGIN

# The bounds of a stats interval in milliseconds; the server's default is 1000.
_STATS_INTERVAL_MIN_MS = 100
_STATS_INTERVAL_MAX_MS = 60000
_STATS_INTERVAL_DEFAULT_MS = 1000
# One line of a stats stream: a sample is about 500 bytes.
_MAX_STATS_LINE = 64 << 10

ToolFunc = Callable[[Any], Any]
"""A caller-executed tool: called with the decoded arguments, returns a
JSON-encodable output; an exception becomes the tool's error."""

FileData = Union[bytes, bytearray, memoryview, str, BinaryIO, Any]


def _command(command: Union[str, Sequence[str]]) -> Dict[str, Any]:
    if isinstance(command, str):
        if not command:
            raise errors.InvalidArgumentError("exec: the command is empty")
        return {"command": command}
    cmd = list(command)
    if not cmd or not all(isinstance(a, str) for a in cmd):
        raise errors.InvalidArgumentError("exec: the argument list must be non-empty strings")
    return {"cmd": cmd}


def _stdin(body: Dict[str, Any], data: Union[None, bytes, str], key: str = "stdin") -> None:
    if data is None:
        return
    if isinstance(data, str):
        body[key] = data
        return
    try:
        body[key] = bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        import base64
        body[key + "_b64"] = base64.b64encode(bytes(data)).decode("ascii")


def _drop_none(d: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def _output_event(line: Mapping[str, Any]) -> ExecOutput:
    data = line.get("data")
    raw = data.encode("utf-8") if isinstance(data, str) and data else (b64(line.get("data_b64")) or b"")
    return ExecOutput(stream=str(line["type"]), data=raw)


def _exit_result(line: Mapping[str, Any]) -> ExecResult:
    res = ExecResult.from_json(line)
    err = line.get("error")
    if isinstance(err, dict):
        res.error = str(err.get("message", ""))
    return res


class _LineStream:
    """Shared machinery of the NDJSON streams: an iterator whose close()
    ends the request, usable as a context manager."""

    def __init__(self, resp: Response) -> None:
        self._resp = resp
        self._lines = resp.lines()
        self._done = False

    def close(self) -> None:
        """Ends the stream (and the request). Safe from another thread."""
        self._done = True
        self._resp.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _next_line(self) -> Optional[Mapping[str, Any]]:
        if self._done:
            return None
        try:
            return next(self._lines)
        except StopIteration:
            self.close()
            raise errors.UnavailableError("%s ended without a result" % self._resp.what, status=200)
        except BaseException:
            self.close()
            raise


class ExecStream(_LineStream):
    """The events of a streamed exec (or of a followed process): ExecStart
    with the pid first (not for a followed process), ExecOutput chunks,
    then one ExecExit. pid and result are set as they arrive; a stream
    that breaks raises the matching AirlockError."""

    def __init__(self, resp: Response) -> None:
        super().__init__(resp)
        self.pid: Optional[int] = None
        self.result: Optional[ExecResult] = None

    def __iter__(self) -> Iterator[ExecEvent]:
        return self

    def __next__(self) -> ExecEvent:
        while True:
            line = self._next_line()
            if line is None:
                raise StopIteration
            t = line.get("type")
            if t == "start":
                self.pid = int(line.get("pid", 0))
                return ExecStart(pid=self.pid)
            if t in ("stdout", "stderr"):
                ev = _output_event(line)
                if ev.data:
                    return ev
                continue
            if t == "exit":
                self.result = _exit_result(line)
                self.close()
                return ExecExit(result=self.result)
            if t == "error":
                self.close()
                raise stream_error(line, "exec stream failed")

    def wait(self, on_output: Optional[Callable[[ExecOutput], Any]] = None) -> ExecResult:
        """Reads the stream to its end, handing output to on_output, and
        returns the result with the output collected in it when no
        on_output is given (at most 16 MiB per stream)."""
        out = {"stdout": bytearray(), "stderr": bytearray()}
        for ev in self:
            if isinstance(ev, ExecOutput):
                if on_output is not None:
                    on_output(ev)
                else:
                    buf = out[ev.stream]
                    room = (16 << 20) - len(buf)
                    buf += ev.data[:max(room, 0)]
        if self.result is None:
            raise errors.UnavailableError("exec stream ended without a result", status=200)
        if on_output is None:
            self.result.stdout, self.result.stderr = bytes(out["stdout"]), bytes(out["stderr"])
        return self.result


class CodeStream(_LineStream):
    """The events of a streamed cell: CodeOutput, CodeResult and at most one
    CodeError as they come, then the CodeExecution, which holds them all."""

    def __init__(self, resp: Response) -> None:
        super().__init__(resp)
        self.execution = CodeExecution()
        self._out: Dict[str, List[str]] = {"stdout": [], "stderr": []}

    def __iter__(self) -> Iterator[CodeEvent]:
        return self

    def __next__(self) -> CodeEvent:
        x = self.execution
        while True:
            line = self._next_line()
            if line is None:
                raise StopIteration
            t = line.get("type")
            if t in ("stdout", "stderr"):
                data = str(line.get("data", ""))
                self._out[str(t)].append(data)
                return CodeOutput(stream=str(t), data=data)
            if t == "result":
                r = CodeResult.from_json(line)
                x.results.append(r)
                return r
            if t == "error":
                if isinstance(line.get("error"), dict):
                    self.close()
                    raise stream_error(line, "code stream failed")
                x.error = CodeError.from_json(line)
                return x.error
            if t == "end":
                end = CodeExecution.from_json(line)
                end.results, end.error = x.results, x.error
                end.stdout, end.stderr = "".join(self._out["stdout"]), "".join(self._out["stderr"])
                self.execution = end
                self.close()
                return end

    def wait(self) -> CodeExecution:
        """Reads the stream to its end and returns the execution."""
        for _ in self:
            pass
        if not self.execution.status:
            raise errors.UnavailableError("code stream ended without a result", status=200)
        return self.execution


class WatchStream(_LineStream):
    """The changes under a watched directory, as WatchEvent objects, until
    close() or the server ends the watch. The watch is in place when the
    stream is returned."""

    def __iter__(self) -> Iterator[WatchEvent]:
        return self

    def __next__(self) -> WatchEvent:
        while True:
            if self._done:
                raise StopIteration
            try:
                line = next(self._lines)
            except StopIteration:
                self.close()
                raise
            except BaseException:
                if self._done:
                    raise StopIteration
                self.close()
                raise
            t = line.get("type")
            if t == "event":
                return WatchEvent(path=str(line.get("path", "")), op=str(line.get("op", "")))
            if t == "error":
                self.close()
                raise stream_error(line, "watch failed")

    def _wait_start(self) -> None:
        line = self._next_line()
        if line is None or line.get("type") != "start":
            if line is not None and line.get("type") == "error":
                self.close()
                raise stream_error(line, "watch failed")
            self.close()
            raise errors.ProtocolError("watch: the stream did not start with a start line")


class StatsStream(_LineStream):
    """Samples of a sandbox's resource use, as SandboxStats objects, one
    every interval until close() or the sandbox ends (the iteration then
    simply ends)."""

    def __init__(self, resp: Response) -> None:
        super().__init__(resp)
        self._lines = resp.lines(_MAX_STATS_LINE)

    def __iter__(self) -> Iterator[SandboxStats]:
        return self

    def __next__(self) -> SandboxStats:
        if self._done:
            raise StopIteration
        try:
            line = next(self._lines)
        except StopIteration:
            self.close()
            raise
        except BaseException:
            if self._done:
                raise StopIteration
            self.close()
            raise
        return SandboxStats.from_json(line)


class FileReader(io.RawIOBase):
    """A file's content as it streams from the sandbox: read(), readinto(),
    iter_chunks(), or hand it to shutil.copyfileobj. Close it (or use it as
    a context manager) when done. A transfer that breaks midway raises
    APIConnectionError instead of ending short."""

    def __init__(self, resp: Response) -> None:
        super().__init__()
        self._resp = resp

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        return self._resp.readinto(b)

    def iter_chunks(self, size: int = CHUNK_SIZE) -> Iterator[bytes]:
        """The content in chunks of at most size bytes."""
        while True:
            b = self._resp.read(size)
            if not b:
                return
            yield b

    def close(self) -> None:
        if not self.closed:
            self._resp.close()
        super().close()


class Client:
    """A client of one Airlock server with one API key.

    url and api_key default to the AIRLOCK_URL and AIRLOCK_API_KEY
    environment variables (url then to http://127.0.0.1:7070). timeout is
    how long, in seconds, the client waits to connect and then for each
    read or write of a request; calls that wait for a command (exec, code,
    run) wait for the command's own timeout plus a margin, and every call
    takes request_timeout to override it. GETs are retried, up to
    max_retries times, on connection errors and on 503 (or 429
    rate_limited) with a short Retry-After; other requests only when the
    connection could not be made at all. A Client is safe to use from
    several threads.
    """

    def __init__(self, url: Optional[str] = None, api_key: Optional[str] = None, timeout: float = DEFAULT_TIMEOUT,
                 max_retries: int = 2, user_agent: str = "airlock-python/0.1.0") -> None:
        url = url or os.environ.get("AIRLOCK_URL") or "http://127.0.0.1:7070"
        api_key = api_key if api_key is not None else os.environ.get("AIRLOCK_API_KEY", "")
        self._t = Transport(url, api_key, timeout, max_retries, user_agent)
        self.url = url.rstrip("/")
        self.timeout = float(timeout)

    def close(self) -> None:
        """Nothing to release (each request has its own connection); for symmetry."""

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _wait(self, command_timeout: Optional[float], request_timeout: Optional[float]) -> float:
        if request_timeout is not None:
            return request_timeout
        return max(self.timeout, float(command_timeout or _DEFAULT_EXEC_TIMEOUT) + _EXEC_MARGIN)

    @staticmethod
    def _sb(id: str, suffix: str = "") -> str:
        return "/v1/sandboxes/" + path_escape(check_id("sandbox id", id)) + suffix

    # ---- the server

    def info(self, *, request_timeout: Optional[float] = None) -> Dict[str, Any]:
        """The daemon's version, runtime and host report (scope admin)."""
        return self._t.json("GET", "/v1/info", timeout=request_timeout)

    def whoami(self, *, request_timeout: Optional[float] = None) -> WhoAmI:
        """The calling key: its tenant, id and scopes."""
        return WhoAmI.from_json(self._t.json("GET", "/v1/whoami", timeout=request_timeout))

    # ---- sandboxes

    def create_sandbox(self, *, template: Optional[str] = None, timeout: Optional[int] = None,
                       idle_timeout: Optional[int] = None, limits: Optional[Mapping[str, Any]] = None,
                       network: Optional[Mapping[str, Any]] = None, env: Optional[Mapping[str, str]] = None,
                       metadata: Optional[Mapping[str, str]] = None, tools: Optional[Sequence[str]] = None,
                       toolsets: Optional[Sequence[str]] = None, command_policy: Optional[Mapping[str, Any]] = None,
                       request_timeout: Optional[float] = None) -> Sandbox:
        """Creates a sandbox. timeout and idle_timeout are in seconds (0 or
        None: the server's defaults); limits is {"cpus","memory_mb","pids",
        "disk_mb"}; network, command_policy as in the API."""
        body = _drop_none({
            "template": template, "timeout_s": timeout, "idle_timeout_s": idle_timeout,
            "limits": dict(limits) if limits else None, "network": dict(network) if network else None,
            "env": dict(env) if env else None, "metadata": dict(metadata) if metadata else None,
            "tools": list(tools) if tools else None, "toolsets": list(toolsets) if toolsets else None,
            "command_policy": dict(command_policy) if command_policy else None,
        })
        return Sandbox.from_json(self._t.json("POST", "/v1/sandboxes", body=body, expect=201,
                                              timeout=request_timeout or max(self.timeout, 120.0)))

    def list_sandboxes(self, *, states: Optional[Sequence[str]] = None, metadata: Optional[Mapping[str, str]] = None,
                       request_timeout: Optional[float] = None) -> List[Sandbox]:
        """The tenant's sandboxes, optionally only those in states and
        whose metadata has every pair of metadata."""
        q: Dict[str, Any] = {"state": list(states) if states else None}
        for k, v in (metadata or {}).items():
            q["metadata." + k] = v
        out = self._t.json("GET", "/v1/sandboxes", query=q, timeout=request_timeout)
        return [Sandbox.from_json(s) for s in out.get("sandboxes") or []]

    def get_sandbox(self, id: str, *, request_timeout: Optional[float] = None) -> Sandbox:
        return Sandbox.from_json(self._t.json("GET", self._sb(id), timeout=request_timeout))

    def delete_sandbox(self, id: str, *, request_timeout: Optional[float] = None) -> None:
        """Destroys a sandbox."""
        self._t.json("DELETE", self._sb(id), expect=204, timeout=request_timeout or max(self.timeout, 120.0))

    def set_timeout(self, id: str, timeout: int, *, request_timeout: Optional[float] = None) -> Sandbox:
        """Makes the sandbox expire timeout seconds from now."""
        return Sandbox.from_json(self._t.json("POST", self._sb(id, "/timeout"), body={"timeout_s": int(timeout)},
                                              timeout=request_timeout))

    def get_network(self, id: str, *, request_timeout: Optional[float] = None) -> Dict[str, Any]:
        """The sandbox's network policy and egress counters."""
        return self._t.json("GET", self._sb(id, "/network"), timeout=request_timeout)

    def _stats_query(self, interval_ms: Optional[int], stream: bool,
                     request_timeout: Optional[float]) -> Tuple[Dict[str, Any], float]:
        if interval_ms is not None and (not isinstance(interval_ms, int) or isinstance(interval_ms, bool)
                                        or not _STATS_INTERVAL_MIN_MS <= interval_ms <= _STATS_INTERVAL_MAX_MS):
            raise errors.InvalidArgumentError("stats interval %r ms: want whole milliseconds from %d to %d"
                                              % (interval_ms, _STATS_INTERVAL_MIN_MS, _STATS_INTERVAL_MAX_MS))
        q = {"interval_ms": interval_ms, "stream": "1" if stream else None}
        wait = request_timeout or max(self.timeout, (interval_ms or _STATS_INTERVAL_DEFAULT_MS) / 1000.0 + _EXEC_MARGIN)
        return q, wait

    def stats(self, id: str, *, interval_ms: Optional[int] = None,
              request_timeout: Optional[float] = None) -> SandboxStats:
        """One sample of the sandbox's resource use and caps, its CPU rate
        measured over interval_ms (100 to 60000; default the server's
        1000): the call takes that long. A sandbox that is not running
        raises FailedPreconditionError. Reading stats does not keep an
        idle sandbox alive."""
        q, wait = self._stats_query(interval_ms, False, request_timeout)
        return SandboxStats.from_json(self._t.json("GET", self._sb(id, "/stats"), query=q, timeout=wait))

    def stream_stats(self, id: str, *, interval_ms: Optional[int] = None,
                     request_timeout: Optional[float] = None) -> StatsStream:
        """Streams a sample of the sandbox's resource use every interval_ms
        (100 to 60000; default 1000) until close() or the sandbox ends: an
        iterator of SandboxStats and a context manager. request_timeout
        bounds the wait for each sample (default: the interval plus 30 s,
        at least the client's timeout). A stream counts against the
        server's caps on requests in flight per sandbox and per key."""
        q, wait = self._stats_query(interval_ms, True, request_timeout)
        return StatsStream(self._t.stream("GET", self._sb(id, "/stats"), query=q, timeout=wait))

    # ---- commands

    def _exec_body(self, command: Union[str, Sequence[str]], cwd: Optional[str], env: Optional[Mapping[str, str]],
                   user: Optional[str], stdin: Union[None, bytes, str], timeout: Optional[int]) -> Dict[str, Any]:
        body = _command(command)
        body.update(_drop_none({"cwd": cwd, "env": dict(env) if env else None, "user": user, "timeout_s": timeout}))
        _stdin(body, stdin)
        return body

    def exec(self, id: str, command: Union[str, Sequence[str]], *, cwd: Optional[str] = None,
             env: Optional[Mapping[str, str]] = None, user: Optional[str] = None,
             stdin: Union[None, bytes, str] = None, timeout: Optional[int] = None,
             request_timeout: Optional[float] = None) -> ExecResult:
        """Runs a command and waits for it: command is a shell line (a str,
        run with /bin/sh -c) or an argument list. timeout (seconds, default
        60) kills it (status "timeout"). Output is capped by the server at
        1 MiB per stream (see stdout_truncated)."""
        body = self._exec_body(command, cwd, env, user, stdin, timeout)
        return ExecResult.from_json(self._t.json("POST", self._sb(id, "/exec"), body=body,
                                                 timeout=self._wait(timeout, request_timeout)))

    def exec_stream(self, id: str, command: Union[str, Sequence[str]], *, cwd: Optional[str] = None,
                    env: Optional[Mapping[str, str]] = None, user: Optional[str] = None,
                    stdin: Union[None, bytes, str] = None, timeout: Optional[int] = None, background: bool = False,
                    tag: Optional[str] = None, keep_stdin: bool = False, pty: Optional[Mapping[str, int]] = None,
                    request_timeout: Optional[float] = None) -> ExecStream:
        """Runs a command and streams its events: ExecStart (the pid), then
        ExecOutput chunks, then ExecExit. background keeps it running when
        the stream ends; keep_stdin leaves its stdin open for send_stdin;
        pty ({"cols","rows"}) runs it on a terminal."""
        body = self._exec_body(command, cwd, env, user, stdin, timeout)
        body.update(_drop_none({"background": background or None, "tag": tag, "keep_stdin": keep_stdin or None,
                                "pty": dict(pty) if pty else None}))
        return ExecStream(self._t.stream("POST", self._sb(id, "/exec"), body=body,
                                         timeout=self._wait(timeout, request_timeout)))

    # ---- processes

    @staticmethod
    def _pid(pid: int) -> str:
        if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
            raise errors.InvalidArgumentError("pid %r is not valid" % (pid,))
        return str(pid)

    def list_processes(self, id: str, *, request_timeout: Optional[float] = None) -> ProcessList:
        return ProcessList.from_json(self._t.json("GET", self._sb(id, "/processes"), timeout=request_timeout))

    def signal_process(self, id: str, pid: int, signal: Union[str, int] = "TERM", *,
                       request_timeout: Optional[float] = None) -> None:
        """Sends a signal (a name such as "TERM" or "SIGKILL", or a number)."""
        self._t.json("POST", self._sb(id, "/processes/%s/signal" % self._pid(pid)), body={"signal": signal},
                     expect=204, timeout=request_timeout)

    def kill_all_processes(self, id: str, *, timeout: Optional[int] = None,
                           request_timeout: Optional[float] = None) -> int:
        """Kills every process but the agent and waits (timeout s, default
        10) until they are reaped; returns how many were killed."""
        out = self._t.json("POST", self._sb(id, "/processes/kill"), body=_drop_none({"timeout_s": timeout}),
                           timeout=self._wait(timeout or 10, request_timeout))
        return int(out.get("killed", 0))

    def follow_process(self, id: str, pid: int, *, request_timeout: Optional[float] = None) -> ExecStream:
        """Streams the output a process the agent started writes from now
        on, then its exit (no ExecStart)."""
        return ExecStream(self._t.open("GET", self._sb(id, "/processes/%s/output" % self._pid(pid)),
                                       headers={"Accept": "application/x-ndjson"},
                                       timeout=request_timeout or 3600.0 + _EXEC_MARGIN))

    def send_stdin(self, id: str, pid: int, data: Union[None, bytes, str] = None, *, close: bool = False,
                   request_timeout: Optional[float] = None) -> None:
        """Writes data to the stdin of a process started with keep_stdin,
        and closes its stdin when close is set."""
        body: Dict[str, Any] = {}
        _stdin(body, data, "data")
        if close:
            body["close"] = True
        self._t.json("POST", self._sb(id, "/processes/%s/stdin" % self._pid(pid)), body=body, expect=204,
                     timeout=request_timeout)

    def resize_process(self, id: str, pid: int, cols: int, rows: int, *,
                       request_timeout: Optional[float] = None) -> None:
        """Sets the terminal size of a process started with pty."""
        self._t.json("POST", self._sb(id, "/processes/%s/resize" % self._pid(pid)),
                     body={"cols": cols, "rows": rows}, expect=204, timeout=request_timeout)

    # ---- files

    @staticmethod
    def _fq(path: str, user: Optional[str], **extra: Any) -> Dict[str, Any]:
        if not isinstance(path, str) or not path or "\x00" in path:
            raise errors.InvalidArgumentError("path %r is not valid" % (path,))
        q: Dict[str, Any] = {"path": path, "user": user}
        q.update(extra)
        return q

    def write_file(self, id: str, path: str, data: FileData, *, user: Optional[str] = None,
                   request_timeout: Optional[float] = None) -> FileInfo:
        """Writes a file: data is bytes or str (sent whole), or a binary file
        object or an iterable of bytes, streamed in chunks (chunked transfer
        encoding) without being read whole. Returns the file with its
        SHA-256. The file is replaced only once all of it has arrived."""
        with self._t.open("PUT", self._sb(id, "/files"), query=self._fq(path, user), body=data,
                          headers={"Content-Type": "application/octet-stream", "Accept": "application/json"},
                          timeout=request_timeout or max(self.timeout, 300.0)) as r:
            return FileInfo.from_json(r.read_json())

    @overload
    def read_file(self, id: str, path: str, dest: None = None, *, user: Optional[str] = None,
                  request_timeout: Optional[float] = None) -> FileReader: ...

    @overload
    def read_file(self, id: str, path: str, dest: BinaryIO, *, user: Optional[str] = None,
                  request_timeout: Optional[float] = None) -> int: ...

    def read_file(self, id: str, path: str, dest: Optional[BinaryIO] = None, *, user: Optional[str] = None,
                  request_timeout: Optional[float] = None) -> Union[FileReader, int]:
        """Reads a file as it streams: without dest, returns a FileReader
        (close it); with dest, a binary file object, copies the content into
        it in chunks and returns the number of bytes."""
        r = self._t.open("GET", self._sb(id, "/files"), query=self._fq(path, user),
                         headers={"Accept": "application/octet-stream"},
                         timeout=request_timeout or max(self.timeout, 300.0))
        reader = FileReader(r)
        if dest is None:
            return reader
        n = 0
        with reader:
            for chunk in reader.iter_chunks():
                dest.write(chunk)
                n += len(chunk)
        return n

    def read_bytes(self, id: str, path: str, *, user: Optional[str] = None, max_bytes: int = 64 << 20,
                   request_timeout: Optional[float] = None) -> bytes:
        """A small file's content, whole (at most max_bytes)."""
        buf = bytearray()
        with self.read_file(id, path, user=user, request_timeout=request_timeout) as f:
            for chunk in f.iter_chunks():
                buf += chunk
                if len(buf) > max_bytes:
                    raise errors.ResponseTooLargeError("the file is larger than %d bytes" % max_bytes)
        return bytes(buf)

    def remove_file(self, id: str, path: str, *, recursive: bool = False, user: Optional[str] = None,
                    request_timeout: Optional[float] = None) -> None:
        """Deletes a file, or a directory (with its contents when recursive)."""
        q = self._fq(path, user, recursive=True if recursive else None)
        self._t.json("DELETE", self._sb(id, "/files"), query=q, expect=204, timeout=request_timeout)

    def make_dir(self, id: str, path: str, *, user: Optional[str] = None,
                 request_timeout: Optional[float] = None) -> FileInfo:
        """Creates a directory with its missing parents (like mkdir -p)."""
        return FileInfo.from_json(self._t.json("POST", self._sb(id, "/files/mkdir"), query=self._fq(path, user),
                                               timeout=request_timeout))

    def list_dir(self, id: str, path: str = "", *, depth: int = 1, user: Optional[str] = None,
                 request_timeout: Optional[float] = None) -> DirListing:
        """A directory's entries (default: the user's home), depth levels deep."""
        q = {"path": path or None, "user": user, "depth": depth if depth != 1 else None}
        out = self._t.json("GET", self._sb(id, "/files/list"), query=q, timeout=request_timeout)
        return DirListing(entries=[FileInfo.from_json(e) for e in out.get("entries") or []],
                          truncated=bool(out.get("truncated")))

    def stat_file(self, id: str, path: str, *, user: Optional[str] = None,
                  request_timeout: Optional[float] = None) -> FileInfo:
        """Describes a file or directory (a symlink itself); NotFoundError when none."""
        return FileInfo.from_json(self._t.json("GET", self._sb(id, "/files/stat"), query=self._fq(path, user),
                                               timeout=request_timeout))

    def move_file(self, id: str, path: str, to: str, *, user: Optional[str] = None,
                  request_timeout: Optional[float] = None) -> FileInfo:
        """Renames path to `to` (a file there is replaced)."""
        q = self._fq(path, user, to=to)
        return FileInfo.from_json(self._t.json("POST", self._sb(id, "/files/move"), query=q,
                                               timeout=request_timeout))

    def watch_dir(self, id: str, path: Optional[str] = None, *, recursive: bool = False, user: Optional[str] = None,
                  request_timeout: Optional[float] = None) -> WatchStream:
        """Watches a directory: returns once the watch is in place, as an
        iterator of WatchEvent; close() ends it. request_timeout bounds
        the wait for each event (default: the server's limit, 1 h)."""
        q = {"path": path, "recursive": True if recursive else None, "user": user}
        w = WatchStream(self._t.open("GET", self._sb(id, "/files/watch"), query=q,
                                     headers={"Accept": "application/x-ndjson"},
                                     timeout=request_timeout or _WATCH_TIMEOUT))
        w._wait_start()
        return w

    # ---- code

    def _code_body(self, code: str, language: Optional[str], context_id: Optional[str],
                   env: Optional[Mapping[str, str]], timeout: Optional[int]) -> Dict[str, Any]:
        if not isinstance(code, str):
            raise errors.InvalidArgumentError("code must be a str")
        if language is None and context_id is None:
            language = "python"
        return _drop_none({"code": code, "language": language, "context_id": context_id,
                           "env": dict(env) if env else None, "timeout_s": timeout})

    def run_code(self, id: str, code: str, *, language: Optional[str] = None, context_id: Optional[str] = None,
                 env: Optional[Mapping[str, str]] = None, timeout: Optional[int] = None,
                 request_timeout: Optional[float] = None) -> CodeExecution:
        """Runs a cell in a stateful context: context_id's, or the default
        context of language (python, javascript or bash; default python).
        Returns its execution: results (text, html, png bytes...), stdout,
        stderr and error."""
        body = self._code_body(code, language, context_id, env, timeout)
        return CodeExecution.from_json(self._t.json("POST", self._sb(id, "/code"), body=body,
                                                    timeout=self._wait(timeout, request_timeout)))

    def run_code_stream(self, id: str, code: str, *, language: Optional[str] = None,
                        context_id: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
                        timeout: Optional[int] = None, request_timeout: Optional[float] = None) -> CodeStream:
        """Runs a cell and streams its events (CodeOutput, CodeResult,
        CodeError), ending with the CodeExecution."""
        body = self._code_body(code, language, context_id, env, timeout)
        return CodeStream(self._t.stream("POST", self._sb(id, "/code"), body=body,
                                         timeout=self._wait(timeout, request_timeout)))

    def _ctx(self, id: str, context_id: str, suffix: str = "") -> str:
        return self._sb(id, "/contexts/" + path_escape(check_id("context id", context_id)) + suffix)

    def create_context(self, id: str, language: str = "python", *, cwd: Optional[str] = None,
                       env: Optional[Mapping[str, str]] = None, request_timeout: Optional[float] = None) -> CodeContext:
        """Creates a code context of language, in cwd, with env added."""
        body = _drop_none({"language": language, "cwd": cwd, "env": dict(env) if env else None})
        return CodeContext.from_json(self._t.json("POST", self._sb(id, "/contexts"), body=body, expect=201,
                                                  timeout=request_timeout or max(self.timeout, 120.0)))

    def list_contexts(self, id: str, *, request_timeout: Optional[float] = None) -> List[CodeContext]:
        out = self._t.json("GET", self._sb(id, "/contexts"), timeout=request_timeout)
        return [CodeContext.from_json(c) for c in out.get("contexts") or []]

    def delete_context(self, id: str, context_id: str, *, request_timeout: Optional[float] = None) -> None:
        self._t.json("DELETE", self._ctx(id, context_id), expect=204, timeout=request_timeout)

    def restart_context(self, id: str, context_id: str, *, request_timeout: Optional[float] = None) -> CodeContext:
        """Restarts a context's kernel: its state is lost."""
        return CodeContext.from_json(self._t.json("POST", self._ctx(id, context_id, "/restart"),
                                                  timeout=request_timeout or max(self.timeout, 120.0)))

    def interrupt_context(self, id: str, context_id: str, *, request_timeout: Optional[float] = None) -> bool:
        """Interrupts the running cell; returns whether one was running."""
        out = self._t.json("POST", self._ctx(id, context_id, "/interrupt"), timeout=request_timeout)
        return bool(out.get("interrupted"))

    # ---- templates

    def list_templates(self, *, request_timeout: Optional[float] = None) -> TemplateList:
        """The templates the tenant sees (its own and the shared ones) and the disk they use."""
        out = self._t.json("GET", "/v1/templates", timeout=request_timeout)
        return TemplateList(templates=[Template.from_json(t) for t in out.get("templates") or []],
                            usage=out.get("usage") or {})

    def get_template(self, name: str, *, shared: bool = False,
                     request_timeout: Optional[float] = None) -> TemplateDetail:
        """A template with its layers and config (shared: only the shared one of that name)."""
        q = {"shared": True if shared else None}
        return TemplateDetail.from_json(self._t.json("GET", "/v1/templates/" + path_escape(check_id("template", name)),
                                                     query=q, timeout=request_timeout))

    # ---- keys

    def create_key(self, name: str, scopes: Sequence[str], *, expires_in: Optional[int] = None,
                   request_timeout: Optional[float] = None) -> CreatedKey:
        """Creates an API key with scopes (scope admin); its secret is in .key."""
        body = _drop_none({"name": name, "scopes": list(scopes), "expires_in_s": expires_in})
        return CreatedKey.from_json(self._t.json("POST", "/v1/keys", body=body, expect=201, timeout=request_timeout))

    def list_keys(self, *, request_timeout: Optional[float] = None) -> List[Key]:
        out = self._t.json("GET", "/v1/keys", timeout=request_timeout)
        return [Key.from_json(k) for k in out.get("keys") or []]

    def revoke_key(self, key_id: str, *, request_timeout: Optional[float] = None) -> None:
        self._t.json("DELETE", "/v1/keys/" + path_escape(check_id("key id", key_id)), expect=204,
                     timeout=request_timeout)

    # ---- tools, toolsets, approvals

    @staticmethod
    def _tool_body(input_schema: Mapping[str, Any], upstream: Mapping[str, Any], output_schema: Optional[Mapping[str, Any]],
                   governance: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
        return _drop_none({"input_schema": dict(input_schema), "upstream": dict(upstream),
                           "output_schema": dict(output_schema) if output_schema else None,
                           "governance": dict(governance) if governance else None})

    def list_tools(self, *, request_timeout: Optional[float] = None) -> List[Tool]:
        out = self._t.json("GET", "/v1/tools", timeout=request_timeout)
        return [Tool.from_json(t) for t in out.get("tools") or []]

    def get_tool(self, name: str, *, request_timeout: Optional[float] = None) -> Tool:
        return Tool.from_json(self._t.json("GET", "/v1/tools/" + path_escape(check_id("tool", name)),
                                           timeout=request_timeout))

    def create_tool(self, name: str, *, input_schema: Mapping[str, Any], upstream: Mapping[str, Any],
                    output_schema: Optional[Mapping[str, Any]] = None, governance: Optional[Mapping[str, Any]] = None,
                    request_timeout: Optional[float] = None) -> Tool:
        """Registers a tool. upstream is {"kind":"caller"} for a tool the
        program's caller runs (see run's tools), {"kind":"http","http":{...}}
        or {"kind":"mcp","mcp":{...}}."""
        body = self._tool_body(input_schema, upstream, output_schema, governance)
        body["name"] = name
        return Tool.from_json(self._t.json("POST", "/v1/tools", body=body, expect=201, timeout=request_timeout))

    def replace_tool(self, name: str, *, input_schema: Mapping[str, Any], upstream: Mapping[str, Any],
                     output_schema: Optional[Mapping[str, Any]] = None, governance: Optional[Mapping[str, Any]] = None,
                     request_timeout: Optional[float] = None) -> Tool:
        body = self._tool_body(input_schema, upstream, output_schema, governance)
        return Tool.from_json(self._t.json("PUT", "/v1/tools/" + path_escape(check_id("tool", name)), body=body,
                                           timeout=request_timeout))

    def delete_tool(self, name: str, *, request_timeout: Optional[float] = None) -> None:
        self._t.json("DELETE", "/v1/tools/" + path_escape(check_id("tool", name)), expect=204,
                     timeout=request_timeout)

    def call_tool(self, name: str, args: Optional[Mapping[str, Any]] = None, *,
                  request_timeout: Optional[float] = None) -> Any:
        """Calls a tool through the gateway (scope tools:call) and returns its result."""
        out = self._t.json("POST", "/v1/tools/" + path_escape(check_id("tool", name)) + "/call",
                           body={"args": dict(args or {})}, timeout=request_timeout)
        return out.get("result")

    def list_toolsets(self, *, request_timeout: Optional[float] = None) -> List[Toolset]:
        out = self._t.json("GET", "/v1/toolsets", timeout=request_timeout)
        return [Toolset.from_json(t) for t in out.get("toolsets") or []]

    def get_toolset(self, name: str, *, request_timeout: Optional[float] = None) -> Toolset:
        return Toolset.from_json(self._t.json("GET", "/v1/toolsets/" + path_escape(check_id("toolset", name)),
                                              timeout=request_timeout))

    def create_toolset(self, name: str, tools: Sequence[str], *, request_timeout: Optional[float] = None) -> Toolset:
        return Toolset.from_json(self._t.json("POST", "/v1/toolsets", body={"name": name, "tools": list(tools)},
                                              expect=201, timeout=request_timeout))

    def replace_toolset(self, name: str, tools: Sequence[str], *, request_timeout: Optional[float] = None) -> Toolset:
        return Toolset.from_json(self._t.json("PUT", "/v1/toolsets/" + path_escape(check_id("toolset", name)),
                                              body={"tools": list(tools)}, timeout=request_timeout))

    def delete_toolset(self, name: str, *, request_timeout: Optional[float] = None) -> None:
        self._t.json("DELETE", "/v1/toolsets/" + path_escape(check_id("toolset", name)), expect=204,
                     timeout=request_timeout)

    def list_approvals(self, *, state: Optional[str] = None, request_timeout: Optional[float] = None) -> List[Approval]:
        """The tenant's approvals, optionally only those in state (e.g. "pending")."""
        out = self._t.json("GET", "/v1/approvals", query={"state": state}, timeout=request_timeout)
        return [Approval.from_json(a) for a in out.get("approvals") or []]

    def get_approval(self, approval_id: str, *, request_timeout: Optional[float] = None) -> Approval:
        return Approval.from_json(self._t.json("GET", "/v1/approvals/" + path_escape(check_id("approval id", approval_id)),
                                               timeout=request_timeout))

    def decide_approval(self, approval_id: str, approve: bool, reason: str = "", *,
                        request_timeout: Optional[float] = None) -> Approval:
        """Approves or denies a waiting tool call."""
        body = _drop_none({"decision": "approve" if approve else "deny", "reason": reason or None})
        return Approval.from_json(self._t.json("POST", "/v1/approvals/" + path_escape(check_id("approval id", approval_id)),
                                               body=body, timeout=request_timeout))

    # ---- programs that call tools

    def tool_requests(self, id: str, *, request_timeout: Optional[float] = None) -> List[ToolRequest]:
        """The calls of caller-executed tools that wait for an answer."""
        out = self._t.json("GET", self._sb(id, "/tool-calls"), timeout=request_timeout)
        return [ToolRequest.from_json(c) for c in out.get("calls") or []]

    def answer_tool_call(self, id: str, call_id: str, output: Any = None, *, error: Optional[str] = None,
                         request_timeout: Optional[float] = None) -> None:
        """Answers a waiting call with output (JSON-encodable) or, when error
        is set, with that error."""
        if error is not None:
            body: Dict[str, Any] = {"error": (error or "the tool failed")[:4096]}
        else:
            try:
                json.dumps(output)
            except (TypeError, ValueError) as e:
                raise errors.InvalidArgumentError("the output of tool call %s does not encode as JSON: %s"
                                                  % (call_id, e)) from e
            body = {"output": output}
        self._t.json("POST", self._sb(id, "/tool-calls/" + path_escape(check_id("tool call id", call_id))),
                     body=body, expect=204, timeout=request_timeout)

    def run(self, id: str, code: str, *, language: str = "python", timeout: Optional[int] = None,
            env: Optional[Mapping[str, str]] = None, tools: Optional[Mapping[str, ToolFunc]] = None,
            on_output: Optional[Callable[[ExecOutput], Any]] = None,
            on_tool_call: Optional[Callable[[ToolCallTrace], Any]] = None, max_tool_calls: int = 64,
            request_timeout: Optional[float] = None) -> RunResult:
        """Runs a program that calls the tools granted to the sandbox. tools
        maps the names of caller-executed tools to functions this process
        runs when the program calls them (up to max_tool_calls at once, in
        threads). The run is streamed when tools, on_output or
        on_tool_call is given."""
        body = _drop_none({"language": language, "code": code, "timeout_s": timeout,
                           "env": dict(env) if env else None})
        return self._run(self._sb(id, "/run"), body, id, tools, on_output, on_tool_call, max_tool_calls,
                         self._wait(timeout, request_timeout))

    def run_once(self, code: str, *, language: str = "python", timeout: Optional[int] = None,
                 env: Optional[Mapping[str, str]] = None, template: Optional[str] = None,
                 network: Optional[Mapping[str, Any]] = None, limits: Optional[Mapping[str, Any]] = None,
                 tools: Optional[Mapping[str, ToolFunc]] = None, tool_names: Optional[Sequence[str]] = None,
                 toolsets: Optional[Sequence[str]] = None, on_output: Optional[Callable[[ExecOutput], Any]] = None,
                 on_tool_call: Optional[Callable[[ToolCallTrace], Any]] = None, max_tool_calls: int = 64,
                 request_timeout: Optional[float] = None) -> RunResult:
        """Runs a program in a sandbox created and destroyed for it (scope
        tools:call is enough). The program is granted toolsets and the
        tools named in tool_names (default: the keys of tools, the
        caller-executed ones this process answers, as in run)."""
        grant = list(tool_names) if tool_names is not None else sorted(tools) if tools else None
        body = _drop_none({"language": language, "code": code, "timeout_s": timeout,
                           "env": dict(env) if env else None, "template": template,
                           "network": dict(network) if network else None, "limits": dict(limits) if limits else None,
                           "tools": grant or None, "toolsets": list(toolsets) if toolsets else None})
        return self._run("/v1/run", body, None, tools, on_output, on_tool_call, max_tool_calls,
                         self._wait(timeout, request_timeout) + 60.0)

    def _run(self, path: str, body: Dict[str, Any], sandbox_id: Optional[str], tools: Optional[Mapping[str, ToolFunc]],
             on_output: Optional[Callable[[ExecOutput], Any]], on_tool_call: Optional[Callable[[ToolCallTrace], Any]],
             max_tool_calls: int, wait: float) -> RunResult:
        if not tools and on_output is None and on_tool_call is None:
            return RunResult.from_json(self._t.json("POST", path, body=body, timeout=wait))
        return _Runner(self, sandbox_id, dict(tools or {}), on_output, on_tool_call, max(1, max_tool_calls)).run(
            self._t.stream("POST", path, body=body, timeout=wait))


class _Runner:
    """Reads a run's stream and answers its tool requests in threads."""

    def __init__(self, c: Client, sandbox_id: Optional[str], tools: Dict[str, ToolFunc],
                 on_output: Optional[Callable[[ExecOutput], Any]],
                 on_tool_call: Optional[Callable[[ToolCallTrace], Any]], max_calls: int) -> None:
        self.c, self.sandbox_id, self.tools = c, sandbox_id, tools
        self.on_output, self.on_tool_call, self.max_calls = on_output, on_tool_call, max_calls
        self.answer_error: Optional[BaseException] = None
        self.lock = threading.Lock()
        self.resp: Optional[Response] = None

    def run(self, resp: Response) -> RunResult:
        self.resp = resp
        out = {"stdout": bytearray(), "stderr": bytearray()}
        cut = {"stdout": False, "stderr": False}
        traces: List[ToolCallTrace] = []
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=self.max_calls, thread_name_prefix="airlock-tool")
        result: Optional[RunResult] = None
        try:
            with resp:
                for line in resp.lines():
                    t = line.get("type")
                    if t == "start":
                        self.sandbox_id = str(line.get("sandbox_id") or self.sandbox_id or "")
                    elif t in ("stdout", "stderr"):
                        ev = _output_event(line)
                        if self.on_output is not None:
                            self.on_output(ev)
                        else:
                            buf = out[ev.stream]
                            room = (16 << 20) - len(buf)
                            if room < len(ev.data):
                                cut[ev.stream] = True
                            buf += ev.data[:max(room, 0)]
                    elif t == "tool_request":
                        pool.submit(self._answer, ToolRequest.from_json(line))
                    elif t == "tool_call":
                        tr = ToolCallTrace.from_json(line)
                        traces.append(tr)
                        if self.on_tool_call is not None:
                            self.on_tool_call(tr)
                    elif t == "exit":
                        result = RunResult.from_json(line)
                        err = line.get("error")
                        if isinstance(err, dict):
                            result.error = str(err.get("message", ""))
                        break
                    elif t == "error":
                        raise stream_error(line, "run stream failed")
        except errors.AirlockError:
            if self.answer_error is not None:
                raise self.answer_error
            raise
        finally:
            pool.shutdown(wait=True)
        if self.answer_error is not None:
            raise self.answer_error
        if result is None:
            raise errors.UnavailableError("run stream ended without a result", status=200)
        result.sandbox_id = self.sandbox_id or ""
        result.stdout, result.stderr = bytes(out["stdout"]), bytes(out["stderr"])
        result.stdout_truncated = result.stdout_truncated or cut["stdout"]
        result.stderr_truncated = result.stderr_truncated or cut["stderr"]
        result.tool_calls = traces
        return result

    def _answer(self, req: ToolRequest) -> None:
        fn = self.tools.get(req.tool)
        output: Any = None
        err: Optional[str] = None
        if fn is None:
            err = "this caller runs no tool %s" % req.tool
        else:
            try:
                output = fn(req.args)
                json.dumps(output)
            except Exception as e:  # noqa: BLE001 - the tool's failure goes to the program
                err = str(e) or type(e).__name__
                output = None
        try:
            self.c.answer_tool_call(self.sandbox_id or "", req.id, output, error=err)
        except errors.AirlockError as e:
            with self.lock:
                if self.answer_error is None:
                    self.answer_error = e
            if self.resp is not None:
                self.resp.close()  # the program would wait for the answer in vain

