"""The asyncio client: the synchronous client's surface, each call run in
a thread pool of the client's own (see the README for why)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
from typing import Any, AsyncIterator, BinaryIO, Callable, Dict, List, Mapping, Optional, TypeVar, Union

from .client import DEFAULT_TIMEOUT, Client, CodeStream, ExecStream, FileReader, StatsStream, WatchStream
from .models import (Approval, CodeContext, CodeEvent, CodeExecution, CreatedKey, DirListing, ExecEvent, ExecOutput,
                     ExecResult, FileInfo, Key, ProcessList, RunResult, Sandbox, SandboxStats, TemplateDetail,
                     TemplateList, Tool, ToolRequest, Toolset, WatchEvent, WhoAmI)

__all__ = ["AsyncClient", "AsyncExecStream", "AsyncCodeStream", "AsyncWatchStream", "AsyncStatsStream",
           "AsyncFileReader"]

T = TypeVar("T")
_END = object()


def _next_or_end(it: Any) -> Any:
    try:
        return next(it)
    except StopIteration:
        return _END


class _AsyncStream:
    """An async iterator over one of the client's streams; each step runs
    in the pool. Leaving `async with`, aclose() or cancelling a waiting
    step ends the request."""

    def __init__(self, owner: "AsyncClient", stream: Any) -> None:
        self._owner = owner
        self._stream = stream

    def __aiter__(self) -> Any:
        return self

    async def __anext__(self) -> Any:
        try:
            v = await self._owner._run(_next_or_end, self._stream)
        except asyncio.CancelledError:
            self._stream.close()
            raise
        if v is _END:
            raise StopAsyncIteration
        return v

    async def aclose(self) -> None:
        self._stream.close()

    async def __aenter__(self) -> Any:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


class AsyncExecStream(_AsyncStream):
    """ExecStream's events as an async iterator."""

    _stream: ExecStream

    @property
    def pid(self) -> Optional[int]:
        return self._stream.pid

    @property
    def result(self) -> Optional[ExecResult]:
        return self._stream.result

    def __aiter__(self) -> AsyncIterator[ExecEvent]:
        return self

    async def wait(self, on_output: Optional[Callable[[ExecOutput], Any]] = None) -> ExecResult:
        """As ExecStream.wait; on_output may be a coroutine function."""
        cb = self._owner._bridge(on_output) if on_output is not None else None
        try:
            return await self._owner._run(self._stream.wait, cb)
        except asyncio.CancelledError:
            self._stream.close()
            raise


class AsyncCodeStream(_AsyncStream):
    """CodeStream's events as an async iterator."""

    _stream: CodeStream

    def __aiter__(self) -> AsyncIterator[CodeEvent]:
        return self

    async def wait(self) -> CodeExecution:
        try:
            return await self._owner._run(self._stream.wait)
        except asyncio.CancelledError:
            self._stream.close()
            raise


class AsyncWatchStream(_AsyncStream):
    """WatchStream's events as an async iterator."""

    def __aiter__(self) -> AsyncIterator[WatchEvent]:
        return self


class AsyncStatsStream(_AsyncStream):
    """StatsStream's samples as an async iterator."""

    _stream: StatsStream

    def __aiter__(self) -> AsyncIterator[SandboxStats]:
        return self


class AsyncFileReader:
    """A file streaming from the sandbox: await read(n), or iterate
    `async for chunk in reader.iter_chunks()`."""

    def __init__(self, owner: "AsyncClient", reader: FileReader) -> None:
        self._owner = owner
        self._reader = reader

    async def read(self, n: int = -1) -> bytes:
        return await self._owner._run(self._reader.read, n)

    async def iter_chunks(self, size: int = 1 << 20) -> AsyncIterator[bytes]:
        it = self._reader.iter_chunks(size)
        while True:
            b = await self._owner._run(_next_or_end, it)
            if b is _END:
                return
            yield b

    async def aclose(self) -> None:
        self._reader.close()

    async def __aenter__(self) -> "AsyncFileReader":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


class AsyncClient:
    """The asyncio client: every method of Client, as a coroutine, with the
    same arguments (keyword options are passed through as they are) and
    the same exceptions. Blocking I/O runs in a thread pool of
    max_workers threads owned by the client, so that calls run
    concurrently (asyncio.gather) up to that many at once, streams
    included. Close it with `await aclose()` or `async with`.

    Callbacks and caller-executed tools (run, run_once, wait's on_output)
    may be plain functions, run in the pool, or coroutine functions, run
    on the event loop. write_file also takes an async iterable of bytes.
    """

    def __init__(self, url: Optional[str] = None, api_key: Optional[str] = None, timeout: float = DEFAULT_TIMEOUT,
                 max_retries: int = 2, max_workers: int = 32, user_agent: str = "airlock-python/0.1.0") -> None:
        self.sync = Client(url, api_key, timeout=timeout, max_retries=max_retries, user_agent=user_agent)
        self.url = self.sync.url
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="airlock-aio")

    async def aclose(self) -> None:
        """Shuts the pool down (after the calls in flight)."""
        await asyncio.get_running_loop().run_in_executor(None, functools.partial(self._pool.shutdown, wait=True))

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> "asyncio.Future[T]":
        loop = asyncio.get_running_loop()
        return loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    def _bridge(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """fn made callable from a pool thread: a coroutine function runs
        on this loop and the thread waits for it."""
        if not (inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))):
            return fn
        loop = asyncio.get_running_loop()

        def call(*args: Any) -> Any:
            return asyncio.run_coroutine_threadsafe(fn(*args), loop).result()
        return call

    def _sync_iter(self, aiter: Any) -> Any:
        loop = asyncio.get_running_loop()
        it = aiter.__aiter__()

        def gen() -> Any:
            while True:
                try:
                    yield asyncio.run_coroutine_threadsafe(it.__anext__(), loop).result()
                except StopAsyncIteration:
                    return
        return gen()

    # ---- the server, sandboxes

    async def info(self, **kw: Any) -> Dict[str, Any]:
        return await self._run(self.sync.info, **kw)

    async def whoami(self, **kw: Any) -> WhoAmI:
        return await self._run(self.sync.whoami, **kw)

    async def create_sandbox(self, **kw: Any) -> Sandbox:
        return await self._run(self.sync.create_sandbox, **kw)

    async def list_sandboxes(self, **kw: Any) -> List[Sandbox]:
        return await self._run(self.sync.list_sandboxes, **kw)

    async def get_sandbox(self, id: str, **kw: Any) -> Sandbox:
        return await self._run(self.sync.get_sandbox, id, **kw)

    async def delete_sandbox(self, id: str, **kw: Any) -> None:
        return await self._run(self.sync.delete_sandbox, id, **kw)

    async def set_timeout(self, id: str, timeout: int, **kw: Any) -> Sandbox:
        return await self._run(self.sync.set_timeout, id, timeout, **kw)

    async def get_network(self, id: str, **kw: Any) -> Dict[str, Any]:
        return await self._run(self.sync.get_network, id, **kw)

    async def stats(self, id: str, **kw: Any) -> SandboxStats:
        return await self._run(self.sync.stats, id, **kw)

    async def stream_stats(self, id: str, **kw: Any) -> AsyncStatsStream:
        return AsyncStatsStream(self, await self._run(self.sync.stream_stats, id, **kw))

    # ---- commands, processes

    async def exec(self, id: str, command: Union[str, List[str]], **kw: Any) -> ExecResult:
        return await self._run(self.sync.exec, id, command, **kw)

    async def exec_stream(self, id: str, command: Union[str, List[str]], **kw: Any) -> AsyncExecStream:
        return AsyncExecStream(self, await self._run(self.sync.exec_stream, id, command, **kw))

    async def list_processes(self, id: str, **kw: Any) -> ProcessList:
        return await self._run(self.sync.list_processes, id, **kw)

    async def signal_process(self, id: str, pid: int, signal: Union[str, int] = "TERM", **kw: Any) -> None:
        return await self._run(self.sync.signal_process, id, pid, signal, **kw)

    async def kill_all_processes(self, id: str, **kw: Any) -> int:
        return await self._run(self.sync.kill_all_processes, id, **kw)

    async def follow_process(self, id: str, pid: int, **kw: Any) -> AsyncExecStream:
        return AsyncExecStream(self, await self._run(self.sync.follow_process, id, pid, **kw))

    async def send_stdin(self, id: str, pid: int, data: Union[None, bytes, str] = None, **kw: Any) -> None:
        return await self._run(self.sync.send_stdin, id, pid, data, **kw)

    async def resize_process(self, id: str, pid: int, cols: int, rows: int, **kw: Any) -> None:
        return await self._run(self.sync.resize_process, id, pid, cols, rows, **kw)

    # ---- files

    async def write_file(self, id: str, path: str, data: Any, **kw: Any) -> FileInfo:
        """As Client.write_file; data may also be an async iterable of bytes."""
        if hasattr(data, "__aiter__"):
            data = self._sync_iter(data)
        return await self._run(self.sync.write_file, id, path, data, **kw)

    async def read_file(self, id: str, path: str, dest: Optional[BinaryIO] = None,
                        **kw: Any) -> Union[AsyncFileReader, int]:
        """As Client.read_file: an AsyncFileReader, or with dest the bytes
        copied into it (its writes run in the pool)."""
        if dest is not None:
            return await self._run(self.sync.read_file, id, path, dest, **kw)
        return AsyncFileReader(self, await self._run(self.sync.read_file, id, path, **kw))

    async def read_bytes(self, id: str, path: str, **kw: Any) -> bytes:
        return await self._run(self.sync.read_bytes, id, path, **kw)

    async def remove_file(self, id: str, path: str, **kw: Any) -> None:
        return await self._run(self.sync.remove_file, id, path, **kw)

    async def make_dir(self, id: str, path: str, **kw: Any) -> FileInfo:
        return await self._run(self.sync.make_dir, id, path, **kw)

    async def list_dir(self, id: str, path: str = "", **kw: Any) -> DirListing:
        return await self._run(self.sync.list_dir, id, path, **kw)

    async def stat_file(self, id: str, path: str, **kw: Any) -> FileInfo:
        return await self._run(self.sync.stat_file, id, path, **kw)

    async def move_file(self, id: str, path: str, to: str, **kw: Any) -> FileInfo:
        return await self._run(self.sync.move_file, id, path, to, **kw)

    async def watch_dir(self, id: str, path: Optional[str] = None, **kw: Any) -> AsyncWatchStream:
        w: WatchStream = await self._run(self.sync.watch_dir, id, path, **kw)
        return AsyncWatchStream(self, w)

    # ---- code

    async def run_code(self, id: str, code: str, **kw: Any) -> CodeExecution:
        return await self._run(self.sync.run_code, id, code, **kw)

    async def run_code_stream(self, id: str, code: str, **kw: Any) -> AsyncCodeStream:
        return AsyncCodeStream(self, await self._run(self.sync.run_code_stream, id, code, **kw))

    async def create_context(self, id: str, language: str = "python", **kw: Any) -> CodeContext:
        return await self._run(self.sync.create_context, id, language, **kw)

    async def list_contexts(self, id: str, **kw: Any) -> List[CodeContext]:
        return await self._run(self.sync.list_contexts, id, **kw)

    async def delete_context(self, id: str, context_id: str, **kw: Any) -> None:
        return await self._run(self.sync.delete_context, id, context_id, **kw)

    async def restart_context(self, id: str, context_id: str, **kw: Any) -> CodeContext:
        return await self._run(self.sync.restart_context, id, context_id, **kw)

    async def interrupt_context(self, id: str, context_id: str, **kw: Any) -> bool:
        return await self._run(self.sync.interrupt_context, id, context_id, **kw)

    # ---- templates, keys

    async def list_templates(self, **kw: Any) -> TemplateList:
        return await self._run(self.sync.list_templates, **kw)

    async def get_template(self, name: str, **kw: Any) -> TemplateDetail:
        return await self._run(self.sync.get_template, name, **kw)

    async def create_key(self, name: str, scopes: List[str], **kw: Any) -> CreatedKey:
        return await self._run(self.sync.create_key, name, scopes, **kw)

    async def list_keys(self, **kw: Any) -> List[Key]:
        return await self._run(self.sync.list_keys, **kw)

    async def revoke_key(self, key_id: str, **kw: Any) -> None:
        return await self._run(self.sync.revoke_key, key_id, **kw)

    # ---- tools, toolsets, approvals

    async def list_tools(self, **kw: Any) -> List[Tool]:
        return await self._run(self.sync.list_tools, **kw)

    async def get_tool(self, name: str, **kw: Any) -> Tool:
        return await self._run(self.sync.get_tool, name, **kw)

    async def create_tool(self, name: str, **kw: Any) -> Tool:
        return await self._run(self.sync.create_tool, name, **kw)

    async def replace_tool(self, name: str, **kw: Any) -> Tool:
        return await self._run(self.sync.replace_tool, name, **kw)

    async def delete_tool(self, name: str, **kw: Any) -> None:
        return await self._run(self.sync.delete_tool, name, **kw)

    async def call_tool(self, name: str, args: Optional[Mapping[str, Any]] = None, **kw: Any) -> Any:
        return await self._run(self.sync.call_tool, name, args, **kw)

    async def list_toolsets(self, **kw: Any) -> List[Toolset]:
        return await self._run(self.sync.list_toolsets, **kw)

    async def get_toolset(self, name: str, **kw: Any) -> Toolset:
        return await self._run(self.sync.get_toolset, name, **kw)

    async def create_toolset(self, name: str, tools: List[str], **kw: Any) -> Toolset:
        return await self._run(self.sync.create_toolset, name, tools, **kw)

    async def replace_toolset(self, name: str, tools: List[str], **kw: Any) -> Toolset:
        return await self._run(self.sync.replace_toolset, name, tools, **kw)

    async def delete_toolset(self, name: str, **kw: Any) -> None:
        return await self._run(self.sync.delete_toolset, name, **kw)

    async def list_approvals(self, **kw: Any) -> List[Approval]:
        return await self._run(self.sync.list_approvals, **kw)

    async def get_approval(self, approval_id: str, **kw: Any) -> Approval:
        return await self._run(self.sync.get_approval, approval_id, **kw)

    async def decide_approval(self, approval_id: str, approve: bool, reason: str = "", **kw: Any) -> Approval:
        return await self._run(self.sync.decide_approval, approval_id, approve, reason, **kw)

    # ---- programs that call tools

    async def tool_requests(self, id: str, **kw: Any) -> List[ToolRequest]:
        return await self._run(self.sync.tool_requests, id, **kw)

    async def answer_tool_call(self, id: str, call_id: str, output: Any = None, **kw: Any) -> None:
        return await self._run(self.sync.answer_tool_call, id, call_id, output, **kw)

    def _bridge_run(self, kw: Dict[str, Any]) -> Dict[str, Any]:
        if kw.get("tools"):
            kw["tools"] = {k: self._bridge(f) for k, f in kw["tools"].items()}
        for cb in ("on_output", "on_tool_call"):
            if kw.get(cb) is not None:
                kw[cb] = self._bridge(kw[cb])
        return kw

    async def run(self, id: str, code: str, **kw: Any) -> RunResult:
        """As Client.run; tools and callbacks may be coroutine functions."""
        return await self._run(self.sync.run, id, code, **self._bridge_run(kw))

    async def run_once(self, code: str, **kw: Any) -> RunResult:
        """As Client.run_once; tools and callbacks may be coroutine functions."""
        return await self._run(self.sync.run_once, code, **self._bridge_run(kw))

