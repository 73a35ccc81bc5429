"""Call the tools granted to this sandbox through Airlock's tool gateway.

    import tools
    members = tools.call("get_team_members", team="engineering")

    from tools import get_team_members      # a function per granted tool
    members = get_team_members(team="engineering")

    results = await asyncio.gather(*(tools.acall("get_expenses", id=m["id"]) for m in members))

Every call goes to the sandbox's gateway endpoint (AIRLOCK_TOOLS_URL,
default http://127.0.0.1:3129), which decides whether it may run, adds
any credentials and records it. The sandbox holds no token: the channel
identifies it. HTTP proxy settings (HTTP_PROXY and the like) are never
used for these calls.

A refused or failed call raises a ToolError subclass named for its code
(PermissionDenied, InvalidArguments, BudgetExceeded, ...). Calls are
thread-safe and may run concurrently from threads or asyncio tasks.

Standard library only; Python 3.9 or newer.
"""

import asyncio as _asyncio
import concurrent.futures as _concurrent_futures
import functools as _functools
import http.client as _http_client
import inspect as _inspect
import json as _json
import keyword as _keyword
import os as _os
import select as _select
import socket as _socket
import sys as _sys
import threading as _threading
import time as _time
import urllib.parse as _urllib_parse

__all__ = [
    "call", "invoke", "acall", "list_tools", "refresh", "stubs",
    "ToolError", "InvalidArguments", "PermissionDenied", "NotFound",
    "FailedPrecondition", "BudgetExceeded", "RateLimited", "Unavailable",
    "Timeout", "Canceled", "InternalError",
    "DEFAULT_URL", "DEFAULT_TIMEOUT", "MAX_RESPONSE_BYTES",
]

DEFAULT_URL = "http://127.0.0.1:3129"
# Seconds one call may take, answer read included, unless the call says
# otherwise; AIRLOCK_TOOLS_TIMEOUT overrides it.
DEFAULT_TIMEOUT = 300.0
# The largest answer read; a bigger one fails the call.
MAX_RESPONSE_BYTES = 16 << 20
_MAX_IDLE = 32          # idle connections kept for reuse
_MAX_WORKERS = 256      # threads acall may use at once


class ToolError(Exception):
    """A call the gateway refused or that failed. code is the gateway's
    error code (permission_denied, invalid_argument, ...), message its
    words."""

    code = "unknown"

    def __init__(self, code, message):
        super().__init__(code, message)
        self.code = code
        self.message = message

    def __str__(self):
        return "%s: %s" % (self.code, self.message)


class InvalidArguments(ToolError):
    """The arguments do not match the tool's input schema (invalid_argument)."""
    code = "invalid_argument"


class PermissionDenied(ToolError):
    """The tool is not granted, a policy forbids the call, or a person
    denied it (permission_denied)."""
    code = "permission_denied"


class NotFound(ToolError):
    """No tool of that name exists (not_found)."""
    code = "not_found"


class FailedPrecondition(ToolError):
    """The call cannot run in the current state, e.g. an open circuit
    (failed_precondition)."""
    code = "failed_precondition"


class BudgetExceeded(ToolError):
    """A budget of calls, concurrency or size is spent (resource_exhausted)."""
    code = "resource_exhausted"


class RateLimited(BudgetExceeded):
    """The tool's rate budget is spent for now (rate_limited)."""
    code = "rate_limited"


class Unavailable(ToolError):
    """The gateway or the tool's upstream cannot be reached (unavailable)."""
    code = "unavailable"


class Timeout(ToolError):
    """The call took longer than allowed (timeout)."""
    code = "timeout"


class Canceled(ToolError):
    """The call was canceled (canceled)."""
    code = "canceled"


class InternalError(ToolError):
    """The gateway failed, or answered something this module cannot read
    (internal)."""
    code = "internal"


_BY_CODE = {cls.code: cls for cls in (
    InvalidArguments, PermissionDenied, NotFound, FailedPrecondition,
    BudgetExceeded, RateLimited, Unavailable, Timeout, Canceled, InternalError,
)}


def _error(code, message):
    return _BY_CODE.get(code, ToolError)(code, message)


def _default_timeout():
    v = _os.environ.get("AIRLOCK_TOOLS_TIMEOUT", "")
    try:
        t = float(v)
    except ValueError:
        return DEFAULT_TIMEOUT
    return t if t > 0 else DEFAULT_TIMEOUT


class _Endpoint:
    """The gateway's address and a small pool of idle keep-alive
    connections to it, safe to use from many threads."""

    def __init__(self, url):
        u = _urllib_parse.urlsplit(url)
        if u.scheme != "http" or not u.hostname:
            raise InternalError("internal", "AIRLOCK_TOOLS_URL must be an http:// URL, not %r" % url)
        self.url = url
        self.host = u.hostname
        try:
            self.port = u.port or 80
        except ValueError:
            raise InternalError("internal", "AIRLOCK_TOOLS_URL has a bad port: %r" % url) from None
        self.prefix = u.path.rstrip("/")
        self._idle = []
        self._lock = _threading.Lock()

    def _take(self, timeout):
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                # http.client never consults proxy settings: the
                # connection goes straight to the gateway.
                return _http_client.HTTPConnection(self.host, self.port, timeout=timeout), False
            if _still_open(conn):
                conn.sock.settimeout(timeout)
                return conn, True
            conn.close()

    def _give(self, conn):
        with self._lock:
            if len(self._idle) < _MAX_IDLE:
                self._idle.append(conn)
                return
        conn.close()

    def _send(self, method, path, body, headers, timeout):
        """Send a request on a kept connection or a new one. A kept one
        that fails while sending (the gateway closed it just then) is
        replaced once: the gateway never read that request. Once sent, a
        request is never sent again."""
        conn, reused = self._take(timeout)
        while True:
            try:
                conn.request(method, self.prefix + path, body=body, headers=headers)
                return conn
            except (OSError, _http_client.HTTPException):
                conn.close()
                if not reused:
                    raise
            conn, reused = _http_client.HTTPConnection(self.host, self.port, timeout=timeout), False

    def request(self, method, path, body, timeout):
        """Send one request; return (status, decoded JSON body)."""
        deadline = _time.monotonic() + timeout
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        conn = None
        try:
            conn = self._send(method, path, body, headers, timeout)
            resp = conn.getresponse()
            data = _read_capped(conn, resp, deadline)
        except BaseException as e:
            if conn is not None:
                conn.close()
            if isinstance(e, _socket.timeout):
                raise Timeout("timeout", "no answer from the tool gateway within %g s" % timeout) from None
            if isinstance(e, (OSError, _http_client.HTTPException)):
                raise Unavailable("unavailable", "cannot reach the tool gateway at %s: %s" % (self.url, e)) from None
            raise
        if resp.will_close:
            conn.close()
        else:
            self._give(conn)
        try:
            doc = _json.loads(data)
        except ValueError:
            raise InternalError("internal", "the tool gateway answered %d with a body that is not JSON" % resp.status) from None
        return resp.status, doc


def _still_open(conn):
    """Whether an idle pooled connection can take a request: a readable
    idle socket means the gateway closed it (or sent what it should not)."""
    sock = conn.sock
    if sock is None:
        return False
    try:
        if hasattr(_select, "poll"):
            p = _select.poll()
            p.register(sock, _select.POLLIN)
            return not p.poll(0)
        r, _, _ = _select.select([sock], [], [], 0)
        return not r
    except (OSError, ValueError):
        return False


def _read_capped(conn, resp, deadline):
    chunks = []
    size = 0
    while True:
        left = deadline - _time.monotonic()
        if left <= 0:
            raise _socket.timeout()
        if conn.sock is not None:
            conn.sock.settimeout(left)
        chunk = resp.read(min(1 << 16, MAX_RESPONSE_BYTES + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_RESPONSE_BYTES:
            raise BudgetExceeded("resource_exhausted", "the tool gateway's answer is over %d bytes" % MAX_RESPONSE_BYTES)
    return b"".join(chunks)


_endpoint = None
_endpoint_lock = _threading.Lock()


def _gateway():
    global _endpoint
    url = _os.environ.get("AIRLOCK_TOOLS_URL") or DEFAULT_URL
    with _endpoint_lock:
        if _endpoint is None or _endpoint.url != url:
            _endpoint = _Endpoint(url)
        return _endpoint


def _check_error(status, doc):
    if 200 <= status < 300:
        return
    err = doc.get("error") if isinstance(doc, dict) else None
    if isinstance(err, dict) and isinstance(err.get("code"), str):
        raise _error(err["code"], str(err.get("message", "")))
    raise InternalError("internal", "the tool gateway answered %d without an error" % status)


def invoke(name, args=None, *, timeout=None):
    """Call the tool name with args (a dict, JSON-encodable) and return
    its result, decoded from JSON. timeout is in seconds (default
    DEFAULT_TIMEOUT). Raises a ToolError subclass when the gateway
    refuses the call or it fails."""
    if not isinstance(name, str) or not name:
        raise TypeError("the tool name must be a non-empty string")
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise TypeError("a tool's arguments are a dict, not %s" % type(args).__name__)
    if timeout is None:
        timeout = _default_timeout()
    body = _json.dumps({"tool": name, "args": args}, allow_nan=False).encode()
    status, doc = _gateway().request("POST", "/v1/call", body, timeout)
    _check_error(status, doc)
    if not isinstance(doc, dict) or "result" not in doc:
        raise InternalError("internal", "the tool gateway's answer has no result")
    return doc["result"]


def call(name, /, **args):
    """Call the tool name with keyword arguments and return its result:
    call("get_expenses", member_id=7). See invoke for a dict of
    arguments or a timeout."""
    return invoke(name, args)


_executor = None
_executor_lock = _threading.Lock()


def _pool():
    # Not the event loop's default executor: its few threads would make
    # many concurrent calls wait in turn.
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = _concurrent_futures.ThreadPoolExecutor(
                max_workers=_MAX_WORKERS, thread_name_prefix="tools")
        return _executor


async def acall(name, /, **args):
    """The asyncio form of call: await acall("get_expenses", member_id=7).
    Calls awaited together (_asyncio.gather) run concurrently."""
    loop = _asyncio.get_running_loop()
    return await loop.run_in_executor(_pool(), _functools.partial(invoke, name, args))


_granted = None
_granted_lock = _threading.Lock()


def _after_fork():
    # A forked child (multiprocessing) must not share its parent's
    # connections, nor wait on a lock a parent's thread held at the fork.
    global _endpoint, _endpoint_lock, _executor, _executor_lock, _granted_lock
    _endpoint, _executor = None, None
    _endpoint_lock, _executor_lock, _granted_lock = _threading.Lock(), _threading.Lock(), _threading.Lock()


if hasattr(_os, "register_at_fork"):
    _os.register_at_fork(after_in_child=_after_fork)


def list_tools():
    """The tools granted to this sandbox, fetched now: a list of dicts
    with name, description, input_schema and, where set, output_schema."""
    global _granted
    status, doc = _gateway().request("GET", "/v1/tools", None, _default_timeout())
    _check_error(status, doc)
    if not isinstance(doc, dict) or not isinstance(doc.get("tools"), list):
        raise InternalError("internal", "the tool gateway's tool list is malformed")
    out = [t for t in doc["tools"] if isinstance(t, dict) and isinstance(t.get("name"), str)]
    with _granted_lock:
        _granted = {t["name"]: t for t in out}
    return out


def refresh():
    """Fetch the granted tools again (after a grant changed)."""
    list_tools()


def _tools():
    with _granted_lock:
        g = _granted
    if g is None:
        list_tools()
        with _granted_lock:
            g = _granted
    return g


_PY_TYPES = {
    "string": "str", "integer": "int", "number": "float", "boolean": "bool",
    "array": "list", "object": "dict", "null": "None",
}


def _py_type(schema):
    """A Python annotation for a JSON Schema (as text)."""
    if not isinstance(schema, dict):
        return "Any"
    enum = schema.get("enum")
    if isinstance(enum, list) and enum and all(isinstance(v, (str, int, bool)) or v is None for v in enum):
        return "Literal[%s]" % ", ".join(repr(v) for v in enum)
    t = schema.get("type")
    if isinstance(t, list):
        names = [_py_type(dict(schema, type=x)) for x in t]
        names = list(dict.fromkeys(names))
        if "Any" in names:
            return "Any"
        if "None" in names:
            names.remove("None")
            inner = names[0] if len(names) == 1 else "Union[%s]" % ", ".join(names)
            return "Optional[%s]" % inner if names else "None"
        return names[0] if len(names) == 1 else "Union[%s]" % ", ".join(names)
    if t == "array":
        items = schema.get("items")
        return "List[%s]" % _py_type(items) if isinstance(items, dict) else "List[Any]"
    if t == "object":
        return "Dict[str, Any]"
    return _PY_TYPES.get(t, "Any")


def _params(tool):
    """Keyword-only parameters for a tool's input schema: (name, type,
    required) triples, or None when a property name cannot be a Python
    parameter (then the function takes **args)."""
    schema = tool.get("input_schema")
    if not isinstance(schema, dict):
        return None
    props = schema.get("properties")
    if not isinstance(props, dict):
        return None if schema.get("additionalProperties", True) is not False else []
    req = schema.get("required") if isinstance(schema.get("required"), list) else []
    out = []
    for p, s in props.items():
        if not _identifier(p):
            return None
        out.append((p, _py_type(s), p in req))
    out.sort(key=lambda x: not x[2])
    return out


def _identifier(s):
    return isinstance(s, str) and s.isidentifier() and not _keyword.iskeyword(s)


def _function(tool):
    name = tool["name"]

    def fn(**args):
        return invoke(name, args)

    async def afn(**args):
        return await acall(name, **args)

    fn.__name__ = fn.__qualname__ = name if _identifier(name) else "tool"
    fn.__module__ = __name__
    fn.__doc__ = tool.get("description") or None
    params = _params(tool)
    if params is not None:
        fn.__signature__ = _inspect.Signature([
            _inspect.Parameter(p, _inspect.Parameter.KEYWORD_ONLY,
                              default=_inspect.Parameter.empty if r else ...)
            for p, _, r in params])
    fn.acall = afn
    fn.tool = tool
    return fn


def __getattr__(name):
    # PEP 562: tools.get_team_members and from tools import get_team_members.
    if name.startswith("_"):
        raise AttributeError("module %r has no attribute %r" % (__name__, name))
    tool = _tools().get(name)
    if tool is None:
        raise AttributeError("no tool %r is granted to this sandbox (tools.list_tools() lists them)" % name)
    return _function(tool)


def __dir__():
    names = list(globals())
    try:
        names += [n for n in _tools() if _identifier(n)]
    except ToolError:
        pass
    return sorted(set(names))


def stubs(tool_list=None):
    """A .pyi text typing this module and a function per granted tool,
    generated from the tools' schemas (tool_list: list_tools() output;
    fetched when None). Save it as tools.pyi beside your code for type
    checkers and editors."""
    if tool_list is None:
        tool_list = list_tools()
    out = [
        "# Generated from the schemas of the tools granted to this sandbox (tools.stubs()).",
        "from typing import Any, Dict, List, Literal, Optional, Union",
        "",
        "DEFAULT_URL: str",
        "DEFAULT_TIMEOUT: float",
        "MAX_RESPONSE_BYTES: int",
        "",
        "class ToolError(Exception):",
        "    code: str",
        "    message: str",
        "    def __init__(self, code: str, message: str) -> None: ...",
    ]
    for cls in sorted(_BY_CODE.values(), key=lambda c: c.__name__):
        out.append("class %s(%s): ..." % (cls.__name__, cls.__mro__[1].__name__))
    out += [
        "",
        "def call(name: str, /, **args: Any) -> Any: ...",
        "def invoke(name: str, args: Optional[Dict[str, Any]] = None, *, timeout: Optional[float] = None) -> Any: ...",
        "async def acall(name: str, /, **args: Any) -> Any: ...",
        "def list_tools() -> List[Dict[str, Any]]: ...",
        "def refresh() -> None: ...",
        "def stubs(tool_list: Optional[List[Dict[str, Any]]] = None) -> str: ...",
    ]
    for tool in sorted(tool_list, key=lambda t: t.get("name", "")):
        name = tool.get("name")
        if not _identifier(name) or name in globals():
            continue
        params = _params(tool)
        if params is None:
            sig = "**args: Any"
        elif params:
            sig = "*, " + ", ".join(
                ("%s: %s" if r else "%s: %s = ...") % (p, t) for p, t, r in params)
        else:
            sig = ""
        ret = _py_type(tool.get("output_schema")) if tool.get("output_schema") else "Any"
        out.append("")
        out.append("def %s(%s) -> %s:" % (name, sig, ret))
        desc = (tool.get("description") or "").replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
        out.append('    """%s"""' % desc if desc else "    ...")
    return "\n".join(out) + "\n"


def _main(argv):
    usage = "usage: python3 -m tools --stubs | --list"
    if argv == ["--stubs"]:
        _sys.stdout.write(stubs())
        return 0
    if argv == ["--list"]:
        for t in list_tools():
            lines = (t.get("description") or "").splitlines()
            _sys.stdout.write("%s\t%s\n" % (t["name"], lines[0] if lines else ""))
        return 0
    _sys.stderr.write(usage + "\n")
    return 2


if __name__ == "__main__":
    try:
        _sys.exit(_main(_sys.argv[1:]))
    except ToolError as e:
        _sys.stderr.write("tools: %s\n" % e)
        _sys.exit(1)
