"""The Anthropic tool executor: runs the tool_use blocks of an Anthropic
Messages API response in a sandbox and returns the matching tool_result
blocks, ready to be the next user message's content.

The tools are the client tools bash (bash_20250124, a persistent shell
per conversation) and the text editor (text_editor_20250728,
str_replace_based_edit_tool), and Airlock's program tool
(airlock_run_program: a program that may call the sandbox's gateway
tools). The daemon runs them (POST /v1/sandboxes/{id}/anthropic/tool-uses)
with the client's key; a tool that fails is an is_error result.

    import anthropic, airlock

    c = airlock.Client()
    ex = airlock.AnthropicExecutor(c, sandbox_id, session_id="chat-1")
    messages = [{"role": "user", "content": "..."}]
    while True:
        res = model.messages.create(model=..., max_tokens=2048, tools=airlock.ANTHROPIC_TOOLS, messages=messages)
        messages.append({"role": "assistant", "content": res.content})
        if res.stop_reason != "tool_use":
            break
        messages.append({"role": "user", "content": ex.run_tool_uses(res)})
    ex.close()
"""

from __future__ import annotations

import os
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ._http import check_id, path_escape
from .aio import AsyncClient
from .client import Client
from .errors import InvalidArgumentError

__all__ = ["ANTHROPIC_TOOLS", "PROGRAM_TOOL", "AnthropicExecutor", "AsyncAnthropicExecutor"]

#: The name of Airlock's program tool.
PROGRAM_TOOL = "airlock_run_program"

#: The tool definitions the executor serves, for a request's tools.
ANTHROPIC_TOOLS: List[Dict[str, Any]] = [
    {"type": "bash_20250124", "name": "bash"},
    {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"},
    {
        "name": PROGRAM_TOOL,
        "description": (
            "Run a program in the sandbox and get its output. The program may call the tools granted to the "
            "sandbox: in Python `from tools import NAME` then `NAME(arg=...)`, in JavaScript "
            "`const { NAME } = require('tools')` then `await NAME({...})`. Only the program's output and the "
            "outcome of each tool call come back."
        ),
        "input_schema": {
            "type": "object",
            "properties": {
                "language": {"type": "string", "enum": ["python", "javascript", "bash"]},
                "code": {"type": "string", "description": "The program's source."},
                "timeout_s": {"type": "integer", "minimum": 1, "maximum": 3600,
                              "description": "How long it may run (default 60)."},
            },
            "required": ["language", "code"],
        },
    },
]

_SESSION = re.compile(r"^[A-Za-z0-9._-]{1,48}$")
# The wait for one tool use beyond its own timeout, in seconds.
_USE_MARGIN = 60.0


def _block(b: Any) -> Any:
    """A content block as a dict: dicts as they are, the anthropic
    package's models through model_dump (or to_dict)."""
    if isinstance(b, Mapping):
        return dict(b)
    for name in ("model_dump", "to_dict"):
        fn = getattr(b, name, None)
        if callable(fn):
            return fn()
    return b


def _tool_uses(message: Any) -> List[Dict[str, Any]]:
    """The tool_use blocks of message: a dict with "content", an object
    with .content (the anthropic package's Message), or the content list."""
    if isinstance(message, Mapping):
        content = message.get("content")
    elif isinstance(message, (list, tuple)):
        content = message
    else:
        content = getattr(message, "content", None)
    if not isinstance(content, (list, tuple)):
        raise InvalidArgumentError("run_tool_uses: the message has no content list")
    uses = []
    for b in content:
        d = _block(b)
        if isinstance(d, Mapping) and d.get("type") == "tool_use":
            if not isinstance(d.get("id"), str) or not d.get("id"):
                raise InvalidArgumentError("run_tool_uses: a tool_use block has no id")
            uses.append({"type": "tool_use", "id": d["id"], "name": d.get("name"), "input": d.get("input")})
    return uses


class AnthropicExecutor:
    """Runs the tool_use blocks of Anthropic Messages API responses in
    one sandbox, for one conversation, with a Client's key.

    session_id names the conversation (its bash session, tagged
    anthropic-bash-<session_id>, and the order of its tool uses); two
    executors with the same key, sandbox and session_id share a shell.
    By default each executor has its own random one. user, cwd and env
    are the shell's ("user" or "root"; the editor and programs act as
    user too); bash_timeout_ms bounds one command (default 120000);
    session_timeout_s the shell's life (default 3600); max_output_chars
    what a result keeps of an output (default 65536, at least 1024);
    max_file_bytes the largest file the editor reads (default and at
    most 16 MiB); program_timeout_s the program tool's default timeout
    (60).

    run_tool_uses raises for a malformed message and for the API's
    refusals of the sandbox itself (NotFoundError for a missing one,
    PermissionDeniedError for a key without the scope); a tool that
    fails is an is_error result.
    """

    tools = ANTHROPIC_TOOLS

    def __init__(self, client: Client, sandbox_id: str, *, session_id: Optional[str] = None,
                 user: Optional[str] = None, cwd: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
                 bash_timeout_ms: Optional[int] = None, session_timeout_s: Optional[int] = None,
                 max_output_chars: Optional[int] = None, max_file_bytes: Optional[int] = None,
                 program_timeout_s: Optional[int] = None) -> None:
        if not isinstance(client, Client):
            raise InvalidArgumentError("AnthropicExecutor needs an airlock.Client")
        check_id("sandbox id", sandbox_id)
        if session_id is not None and not (isinstance(session_id, str) and _SESSION.match(session_id)):
            raise InvalidArgumentError(
                f"session_id {session_id!r} must be 1 to 48 letters, digits, '.', '_' or '-'")
        for name, v, least in (("bash_timeout_ms", bash_timeout_ms, 1), ("session_timeout_s", session_timeout_s, 1),
                               ("max_output_chars", max_output_chars, 1024), ("max_file_bytes", max_file_bytes, 1),
                               ("program_timeout_s", program_timeout_s, 1)):
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < least):
                raise InvalidArgumentError(f"{name} {v!r} must be an integer of at least {least}")
        self._c = client
        self.sandbox_id = sandbox_id
        self.session_id = session_id or "ex-" + os.urandom(8).hex()
        self._opts = {
            "session": self.session_id, "user": user, "cwd": cwd, "env": dict(env) if env else None,
            "bash_timeout_ms": bash_timeout_ms, "session_timeout_s": session_timeout_s,
            "max_output_chars": max_output_chars, "max_file_bytes": max_file_bytes,
            "program_timeout_s": program_timeout_s,
        }

    def _wait(self, uses: Sequence[Mapping[str, Any]]) -> float:
        """How long the request may take: each use's own timeout and a margin."""
        o = self._opts
        wait = self._c.timeout
        for u in uses:
            inp = u.get("input") if isinstance(u.get("input"), Mapping) else {}
            if u.get("name") == "bash":
                wait += (o["bash_timeout_ms"] or 120_000) / 1000 + _USE_MARGIN
            elif u.get("name") == PROGRAM_TOOL:
                t = inp.get("timeout_s")
                wait += (t if isinstance(t, int) else o["program_timeout_s"] or 60) + _USE_MARGIN
            else:
                wait += _USE_MARGIN
        return wait

    def run_tool_uses(self, message: Any, *, request_timeout: Optional[float] = None) -> List[Dict[str, Any]]:
        """Runs every tool_use block of message (a Messages API response,
        as a dict or the anthropic package's Message, or its content
        list), one after the other, and returns their tool_result blocks
        (dicts) in the same order."""
        uses = _tool_uses(message)
        if not uses:
            return []
        body = {k: v for k, v in self._opts.items() if v is not None}
        body["message"] = {"content": uses}
        out = self._c._t.json("POST", self._path("/tool-uses"), body=body,
                              timeout=request_timeout or self._wait(uses))
        results = []
        for r in out.get("content") or []:
            d = {"type": "tool_result", "tool_use_id": r["tool_use_id"], "content": r["content"]}
            if r.get("is_error"):
                d["is_error"] = True
            results.append(d)
        return results

    def close(self, *, request_timeout: Optional[float] = None) -> None:
        """Ends the bash session (the next bash use starts another) and
        waits until the shell is gone."""
        self._c._t.json("DELETE", self._path("/sessions/" + self.session_id), expect=204,
                        timeout=request_timeout or max(self._c.timeout, 60.0))

    def _path(self, suffix: str) -> str:
        return "/v1/sandboxes/" + path_escape(self.sandbox_id) + "/anthropic" + suffix

    def __enter__(self) -> "AnthropicExecutor":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class AsyncAnthropicExecutor:
    """AnthropicExecutor for an AsyncClient: the same options, its
    run_tool_uses and close coroutines."""

    tools = ANTHROPIC_TOOLS

    def __init__(self, client: AsyncClient, sandbox_id: str, **options: Any) -> None:
        if not isinstance(client, AsyncClient):
            raise InvalidArgumentError("AsyncAnthropicExecutor needs an airlock.AsyncClient")
        self._a = client
        self._ex = AnthropicExecutor(client.sync, sandbox_id, **options)
        self.sandbox_id = sandbox_id
        self.session_id = self._ex.session_id

    async def run_tool_uses(self, message: Any, *, request_timeout: Optional[float] = None) -> List[Dict[str, Any]]:
        """As AnthropicExecutor.run_tool_uses."""
        return await self._a._run(self._ex.run_tool_uses, message, request_timeout=request_timeout)

    async def close(self, *, request_timeout: Optional[float] = None) -> None:
        """As AnthropicExecutor.close."""
        await self._a._run(self._ex.close, request_timeout=request_timeout)

    async def __aenter__(self) -> "AsyncAnthropicExecutor":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
