"""The OpenAI tool executor: runs the client-executed tool calls of an
OpenAI Responses API response in a sandbox and returns the items that
answer them, ready to be the next request's input.

The calls are the shell tool's (shell_call), the local shell tool's
(local_shell_call), apply_patch's (apply_patch_call, V4A diffs) and
function calls of Airlock's airlock_run_program (a program that may call
the sandbox's gateway tools). The daemon runs them
(POST /v1/sandboxes/{id}/openai/tool-calls) with the client's key; a
command or patch that fails is an output the model sees. Calls of other
functions are not run: their call_ids come back in ``unhandled``.

    import openai, airlock

    c = airlock.Client()
    ex = airlock.OpenAIExecutor(c, sandbox_id)
    model = openai.OpenAI()
    response = model.responses.create(model="gpt-5.1", input="...", tools=airlock.OPENAI_TOOLS)
    while True:
        out = ex.run_tool_calls(response)
        if not out["input"]:
            break
        response = model.responses.create(model="gpt-5.1", previous_response_id=response.id,
                                          input=out["input"], tools=airlock.OPENAI_TOOLS)
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence

from ._http import check_id, path_escape
from .aio import AsyncClient
from .client import Client
from .errors import InvalidArgumentError

__all__ = ["OPENAI_TOOLS", "OpenAIExecutor", "AsyncOpenAIExecutor"]

_PROGRAM_TOOL = "airlock_run_program"

#: The tool definitions to pass in a Responses API request's tools: the
#: shell tool (run by the caller, here in the sandbox), apply_patch, and
#: the airlock_run_program function.
OPENAI_TOOLS: List[Dict[str, Any]] = [
    {"type": "shell", "environment": {"type": "local"}},
    {"type": "apply_patch"},
    {
        "type": "function",
        "name": _PROGRAM_TOOL,
        "description": (
            "Runs a program in the sandbox. It can call the tools granted to the sandbox through Airlock's tool "
            "gateway (Python: from tools import NAME; JavaScript: require('tools'); bash: the tool command). "
            "Returns its exit code, output and the trace of its tool calls."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "language": {"type": "string", "enum": ["python", "javascript", "bash"],
                             "description": "The program's language."},
                "code": {"type": "string", "description": "The program."},
                "timeout_s": {"type": ["integer", "null"], "description": "Seconds it may run (default 60, at most 600)."},
            },
            "required": ["language", "code", "timeout_s"],
            "additionalProperties": False,
        },
        "strict": True,
    },
]

# The server's cap on one request, and the wait beyond a call's own
# timeout, in seconds.
_MAX_WAIT = 31 * 60.0
_MARGIN = 30.0


def _item(i: Any) -> Any:
    """An output item as a dict: dicts as they are, the openai package's
    models through to_dict (or model_dump)."""
    if isinstance(i, Mapping):
        return dict(i)
    fn = getattr(i, "to_dict", None)
    if callable(fn):
        return fn()
    fn = getattr(i, "model_dump", None)
    if callable(fn):
        return fn(exclude_none=True)
    return i


def _output(response: Any) -> List[Any]:
    """The output items of response: a dict with "output", an object
    with .output (the openai package's Response), or the items."""
    if isinstance(response, Mapping):
        output = response.get("output")
    elif isinstance(response, (list, tuple)):
        output = response
    else:
        output = getattr(response, "output", None)
    if not isinstance(output, (list, tuple)):
        raise InvalidArgumentError("run_tool_calls: the response has no output list")
    return [_item(i) for i in output]


def _number(v: Any) -> Optional[float]:
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else None


class OpenAIExecutor:
    """Runs the client-executed tool calls of OpenAI Responses API
    responses in one sandbox with a Client's key.

    user ("user" or "root") runs the commands and file edits; cwd is the
    commands' working directory and where relative patch paths start;
    env is added to the commands' environment; timeout_ms is a command's
    or program's timeout when its call sets none (default 60000, at most
    600000); max_output_length caps what the model gets of each output
    stream of a command, in bytes, when its call sets none (default
    65536, at most 1 MiB).

    run_tool_calls raises for a malformed response and for the API's
    refusals of the request itself (NotFoundError for a missing sandbox,
    PermissionDeniedError for a key without the scope: exec, files for
    apply_patch, tools:call for airlock_run_program); a failed command
    or patch is an output the model sees.
    """

    tools = OPENAI_TOOLS

    def __init__(self, client: Client, sandbox_id: str, *, user: Optional[str] = None, cwd: Optional[str] = None,
                 env: Optional[Mapping[str, str]] = None, timeout_ms: Optional[int] = None,
                 max_output_length: Optional[int] = None) -> None:
        if not isinstance(client, Client):
            raise InvalidArgumentError("OpenAIExecutor needs an airlock.Client")
        check_id("sandbox id", sandbox_id)
        if user is not None and user not in ("user", "root"):
            raise InvalidArgumentError(f"user {user!r} must be 'user' or 'root'")
        for name, v, most in (("timeout_ms", timeout_ms, 600_000), ("max_output_length", max_output_length, 1 << 20)):
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= most):
                raise InvalidArgumentError(f"{name} {v!r} must be an integer between 1 and {most}")
        self._c = client
        self.sandbox_id = sandbox_id
        self._opts = {"user": user, "cwd": cwd, "env": dict(env) if env else None, "timeout_ms": timeout_ms,
                      "max_output_length": max_output_length}

    def _wait(self, items: Sequence[Mapping[str, Any]]) -> float:
        """How long the request may take: each call's own timeout and a
        margin, at most the server's cap."""
        default = (self._opts["timeout_ms"] or 60_000) / 1000
        wait = self._c.timeout
        for i in items:
            if not isinstance(i, Mapping):
                continue
            action = i.get("action") if isinstance(i.get("action"), Mapping) else {}
            t = _number(action.get("timeout_ms"))
            per = t / 1000 if t else default
            if i.get("type") == "shell_call":
                n = len(action.get("commands") or []) or 1
                wait += n * per + _MARGIN
            elif i.get("type") == "local_shell_call":
                wait += per + _MARGIN
            elif i.get("type") == "function_call" and i.get("name") == _PROGRAM_TOOL:
                wait += 600 + _MARGIN
            elif i.get("type") == "apply_patch_call":
                wait += _MARGIN
        return min(wait, _MAX_WAIT)

    def run_tool_calls(self, response: Any, *, request_timeout: Optional[float] = None) -> Dict[str, Any]:
        """Runs the tool calls of response (a Responses API response, as a
        dict or the openai package's Response, or its output items) that
        the caller executes, one after the other, and returns
        {"input": [the items answering them, in call order],
        "unhandled": [call_ids of other function calls]}."""
        items = _output(response)
        body: Dict[str, Any] = {k: v for k, v in self._opts.items() if v is not None}
        body["output"] = items
        out = self._c._t.json("POST", "/v1/sandboxes/" + path_escape(self.sandbox_id) + "/openai/tool-calls",
                              body=body, timeout=request_timeout or self._wait(items))
        return {"input": list(out.get("input") or []), "unhandled": list(out.get("unhandled") or [])}


class AsyncOpenAIExecutor:
    """OpenAIExecutor for an AsyncClient: the same options, its
    run_tool_calls coroutine."""

    tools = OPENAI_TOOLS

    def __init__(self, client: AsyncClient, sandbox_id: str, **options: Any) -> None:
        if not isinstance(client, AsyncClient):
            raise InvalidArgumentError("AsyncOpenAIExecutor needs an airlock.AsyncClient")
        self._a = client
        self._ex = OpenAIExecutor(client.sync, sandbox_id, **options)
        self.sandbox_id = sandbox_id

    async def run_tool_calls(self, response: Any, *, request_timeout: Optional[float] = None) -> Dict[str, Any]:
        """As OpenAIExecutor.run_tool_calls."""
        return await self._a._run(self._ex.run_tool_calls, response, request_timeout=request_timeout)
