"""The SDK's result types: dataclasses built from the API's JSON objects
(field names as in the API, snake_case; times as aware datetimes,
base64 fields as bytes)."""

from __future__ import annotations

import base64
import dataclasses
import datetime as _dt
import re
from typing import Any, Dict, List, Mapping, Optional, Type, TypeVar, Union

__all__ = [
    "Sandbox", "ExecResult", "ExecStart", "ExecOutput", "ExecExit", "ExecEvent",
    "SandboxProcess", "ProcessList", "FileInfo", "DirListing", "WatchEvent",
    "CodeResult", "CodeError", "CodeOutput", "CodeExecution", "CodeEvent", "CodeContext",
    "Template", "TemplateDetail", "TemplateList", "Key", "CreatedKey", "WhoAmI",
    "Tool", "Toolset", "Approval", "ToolRequest", "ToolCallTrace", "RunResult",
    "SandboxStats", "StatsCPU", "StatsMemory", "StatsPids", "StatsDisk", "StatsNetwork",
]

T = TypeVar("T")

_TIME = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)$")


def parse_time(v: Any) -> Optional[_dt.datetime]:
    """An RFC 3339 time (nanoseconds cut to microseconds) as an aware
    datetime; None for null or an empty string."""
    if not v or not isinstance(v, str):
        return None
    m = _TIME.match(v)
    if not m:
        return None
    frac = (m.group(2) or "")[1:7].ljust(6, "0") if m.group(2) else "000000"
    tz = "+00:00" if m.group(3) == "Z" else m.group(3)
    return _dt.datetime.fromisoformat("%s.%s%s" % (m.group(1), frac, tz))


def b64(v: Any) -> Optional[bytes]:
    if not v:
        return None
    return base64.b64decode(v)


def _load(cls: Type[T], d: Mapping[str, Any], **extra: Any) -> T:
    """cls from the JSON object d: each field from the key of its name
    (times parsed), unknown keys left out, missing ones at their default."""
    kw: Dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name in extra:
            kw[f.name] = extra[f.name]
        elif f.name in d and d[f.name] is not None:
            v = d[f.name]
            if f.metadata.get("time"):
                v = parse_time(v)
            kw[f.name] = v
    return cls(**kw)


def _time() -> Any:
    return dataclasses.field(default=None, metadata={"time": True})


@dataclasses.dataclass
class Sandbox:
    """A sandbox. state is creating, adopting, running, paused, stopping,
    stopped or failed; idle_timeout_s 0 means none."""

    id: str = ""
    state: str = ""
    template: str = ""
    limits: Dict[str, Any] = dataclasses.field(default_factory=dict)
    metadata: Dict[str, str] = dataclasses.field(default_factory=dict)
    tools: List[str] = dataclasses.field(default_factory=list)
    command_policy: Optional[Dict[str, Any]] = None
    created_at: Optional[_dt.datetime] = _time()
    expires_at: Optional[_dt.datetime] = _time()
    max_expires_at: Optional[_dt.datetime] = _time()
    idle_timeout_s: int = 0
    last_activity_at: Optional[_dt.datetime] = _time()
    stopped_at: Optional[_dt.datetime] = _time()
    end_reason: str = ""
    error: str = ""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Sandbox":
        return _load(cls, d)


@dataclasses.dataclass
class StatsCPU:
    """A sandbox's CPU use, every process's (its agent's included):
    usage_s seconds since it started, rate the CPUs used over the
    sample's interval (0.5: half of one CPU's time), limit its cap in
    CPUs."""

    usage_s: float = 0.0
    rate: float = 0.0
    limit: float = 0.0


@dataclasses.dataclass
class StatsMemory:
    """A sandbox's memory (its processes', its agent's and the files of its
    writable layer, which lives in memory): current and peak bytes, the
    cap on that whole (its memory limit plus the agent's allowance; 0:
    none) and the processes the OOM killer ended."""

    current_bytes: int = 0
    peak_bytes: int = 0
    limit_bytes: int = 0
    oom_kills: int = 0


@dataclasses.dataclass
class StatsPids:
    """A sandbox's tasks (processes and threads, its agent's included) and
    their cap (its pids limit plus the agent's allowance; 0: none)."""

    current: int = 0
    limit: int = 0


@dataclasses.dataclass
class StatsDisk:
    """A sandbox's writable layer: what its files take, and its size."""

    used_bytes: int = 0
    limit_bytes: int = 0


@dataclasses.dataclass
class StatsNetwork:
    """A sandbox's traffic since its network started; source is
    "interface" (its own interface, mode open) or "proxy" (its egress
    proxy, mode allowlist)."""

    source: str = ""
    rx_bytes: int = 0
    tx_bytes: int = 0


@dataclasses.dataclass
class SandboxStats:
    """One sample of a sandbox's resource use and caps. interval_ms is the
    window cpu.rate was measured over; network is None when the sandbox
    has no way out (network_absent says why)."""

    sandbox_id: str = ""
    time: Optional[_dt.datetime] = _time()
    interval_ms: int = 0
    cpu: StatsCPU = dataclasses.field(default_factory=StatsCPU)
    memory: StatsMemory = dataclasses.field(default_factory=StatsMemory)
    pids: StatsPids = dataclasses.field(default_factory=StatsPids)
    disk: StatsDisk = dataclasses.field(default_factory=StatsDisk)
    network: Optional[StatsNetwork] = None
    network_absent: str = ""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "SandboxStats":
        net = d.get("network")
        return _load(cls, d, cpu=_load(StatsCPU, _obj(d.get("cpu"))), memory=_load(StatsMemory, _obj(d.get("memory"))),
                     pids=_load(StatsPids, _obj(d.get("pids"))), disk=_load(StatsDisk, _obj(d.get("disk"))),
                     network=_load(StatsNetwork, net) if isinstance(net, dict) else None)


def _obj(v: Any) -> Mapping[str, Any]:
    return v if isinstance(v, dict) else {}


def _output(d: Mapping[str, Any], name: str) -> bytes:
    if d.get(name) is not None:
        return str(d[name]).encode("utf-8")
    return b64(d.get(name + "_b64")) or b""


@dataclasses.dataclass
class ExecResult:
    """How a command ended. status is success, error (a non-zero exit),
    timeout, resource_exceeded or killed; exit_code is -1 when a signal
    killed it. stdout and stderr are bytes (stdout_text and stderr_text
    decode them)."""

    status: str = ""
    exit_code: int = 0
    signal: int = 0
    stdout: bytes = b""
    stderr: bytes = b""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    duration_ms: int = 0
    cpu_ms: int = 0
    peak_memory_bytes: int = 0
    error: str = ""

    @property
    def stdout_text(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    @property
    def stderr_text(self) -> str:
        return self.stderr.decode("utf-8", "replace")

    @property
    def ok(self) -> bool:
        return self.status == "success"

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ExecResult":
        err = d.get("error")
        return _load(cls, d, stdout=_output(d, "stdout"), stderr=_output(d, "stderr"),
                     error=err if isinstance(err, str) else "")


@dataclasses.dataclass
class ExecStart:
    """The first event of a streamed exec: the process's pid."""

    pid: int
    type: str = "start"


@dataclasses.dataclass
class ExecOutput:
    """A chunk of output; stream is "stdout" or "stderr"."""

    stream: str
    data: bytes
    type: str = "output"

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", "replace")


@dataclasses.dataclass
class ExecExit:
    """The last event: the result (without the output, which came as events)."""

    result: ExecResult
    type: str = "exit"


ExecEvent = Union[ExecStart, ExecOutput, ExecExit]


@dataclasses.dataclass
class SandboxProcess:
    pid: int = 0
    ppid: int = 0
    cmd: List[str] = dataclasses.field(default_factory=list)
    cmd_truncated: bool = False
    name: str = ""
    uid: int = 0
    user: str = ""
    state: str = ""
    cgroup: str = ""
    session: int = 0
    started_at: Optional[_dt.datetime] = _time()
    started_by_agent: bool = False
    tag: str = ""
    background: bool = False

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "SandboxProcess":
        return _load(cls, d)


@dataclasses.dataclass
class ProcessList:
    processes: List[SandboxProcess] = dataclasses.field(default_factory=list)
    total: int = 0
    truncated: bool = False

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ProcessList":
        return _load(cls, d, processes=[SandboxProcess.from_json(p) for p in d.get("processes") or []])


@dataclasses.dataclass
class FileInfo:
    """A file or directory; type is file, dir, symlink or other. sha256 is
    set on the answer of a write."""

    name: str = ""
    path: str = ""
    type: str = ""
    size: int = 0
    mode: int = 0
    uid: int = 0
    gid: int = 0
    mod_time: Optional[_dt.datetime] = _time()
    symlink_target: str = ""
    sha256: str = ""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "FileInfo":
        return _load(cls, d)


@dataclasses.dataclass
class DirListing:
    entries: List[FileInfo] = dataclasses.field(default_factory=list)
    truncated: bool = False


@dataclasses.dataclass
class WatchEvent:
    """A change under a watched directory; op is create, write, remove,
    rename or chmod."""

    path: str
    op: str


@dataclasses.dataclass
class CodeResult:
    """A rich result of a cell: one or more representations. png and jpeg
    are the image's bytes; json is the decoded value."""

    is_main_result: bool = False
    text: Optional[str] = None
    html: Optional[str] = None
    markdown: Optional[str] = None
    svg: Optional[str] = None
    png: Optional[bytes] = None
    jpeg: Optional[bytes] = None
    latex: Optional[str] = None
    json: Any = None
    javascript: Optional[str] = None
    omitted: Optional[str] = None
    type: str = "result"

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "CodeResult":
        return _load(cls, d, png=b64(d.get("png")), jpeg=b64(d.get("jpeg")), type="result")


@dataclasses.dataclass
class CodeError:
    """The exception a cell raised."""

    name: str = ""
    value: str = ""
    traceback: str = ""
    type: str = "error"

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "CodeError":
        return _load(cls, d, type="error")


@dataclasses.dataclass
class CodeOutput:
    """Text a cell printed; stream is "stdout" or "stderr"."""

    stream: str
    data: str
    type: str = "output"


@dataclasses.dataclass
class CodeExecution:
    """A cell's outcome. status is ok, error (see error), timeout,
    interrupted or died."""

    context_id: str = ""
    language: str = ""
    execution_count: int = 0
    status: str = ""
    exit_code: int = 0
    results: List[CodeResult] = dataclasses.field(default_factory=list)
    stdout: str = ""
    stderr: str = ""
    error: Optional[CodeError] = None
    output_truncated: bool = False
    results_truncated: bool = False
    duration_ms: int = 0
    type: str = "end"

    @property
    def main_result(self) -> Optional[CodeResult]:
        """The cell's value (its last expression), if any."""
        for r in self.results:
            if r.is_main_result:
                return r
        return None

    @property
    def text(self) -> Optional[str]:
        """The text of the main result, if any."""
        r = self.main_result
        return r.text if r else None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "CodeExecution":
        err = d.get("error")
        return _load(cls, d, results=[CodeResult.from_json(r) for r in d.get("results") or []],
                     error=CodeError.from_json(err) if isinstance(err, dict) else None, type="end")


CodeEvent = Union[CodeOutput, CodeResult, CodeError, CodeExecution]


@dataclasses.dataclass
class CodeContext:
    """A stateful code context; state is idle, busy or dead (error says why)."""

    id: str = ""
    language: str = ""
    cwd: str = ""
    default: bool = False
    state: str = ""
    error: str = ""
    execution_count: int = 0
    created_at: Optional[_dt.datetime] = _time()

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "CodeContext":
        return _load(cls, d)


@dataclasses.dataclass
class Template:
    name: str = ""
    source: str = ""
    builtin: bool = False
    shared: bool = False
    layers: int = 0
    size: int = 0
    shared_bytes: int = 0
    created: Optional[_dt.datetime] = _time()

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Template":
        return _load(cls, d)


@dataclasses.dataclass
class TemplateDetail(Template):
    layer_list: List[Dict[str, Any]] = dataclasses.field(default_factory=list)
    config: Dict[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "TemplateDetail":
        return _load(cls, d)


@dataclasses.dataclass
class TemplateList:
    templates: List[Template] = dataclasses.field(default_factory=list)
    usage: Dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Key:
    """An API key (without its secret)."""

    id: str = ""
    name: str = ""
    scopes: List[str] = dataclasses.field(default_factory=list)
    created_at: Optional[_dt.datetime] = _time()
    expires_at: Optional[_dt.datetime] = _time()
    last_used_at: Optional[_dt.datetime] = _time()
    revoked_at: Optional[_dt.datetime] = _time()

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Key":
        return _load(cls, d)


@dataclasses.dataclass
class CreatedKey(Key):
    """A new key with its secret, shown only once."""

    key: str = ""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "CreatedKey":
        return _load(cls, d)


@dataclasses.dataclass
class WhoAmI:
    tenant_id: str = ""
    key_id: str = ""
    scopes: List[str] = dataclasses.field(default_factory=list)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "WhoAmI":
        return _load(cls, d)


@dataclasses.dataclass
class Tool:
    """A registered tool. upstream says what runs it (kind http, caller or
    mcp); governance its limits and approval."""

    name: str = ""
    description: str = ""
    input_schema: Dict[str, Any] = dataclasses.field(default_factory=dict)
    output_schema: Optional[Dict[str, Any]] = None
    upstream: Dict[str, Any] = dataclasses.field(default_factory=dict)
    governance: Dict[str, Any] = dataclasses.field(default_factory=dict)
    created_at: Optional[_dt.datetime] = _time()
    updated_at: Optional[_dt.datetime] = _time()

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Tool":
        return _load(cls, d)


@dataclasses.dataclass
class Toolset:
    name: str = ""
    tools: List[str] = dataclasses.field(default_factory=list)
    created_at: Optional[_dt.datetime] = _time()
    updated_at: Optional[_dt.datetime] = _time()

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Toolset":
        return _load(cls, d)


@dataclasses.dataclass
class Approval:
    """A tool call that waits for (or got) a decision."""

    id: str = ""
    state: str = ""
    sandbox: str = ""
    key_id: str = ""
    tool: str = ""
    args: Dict[str, Any] = dataclasses.field(default_factory=dict)
    hash: str = ""
    created_at: Optional[_dt.datetime] = _time()
    expires_at: Optional[_dt.datetime] = _time()
    decided_at: Optional[_dt.datetime] = _time()
    approver: str = ""
    reason: str = ""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Approval":
        return _load(cls, d)


@dataclasses.dataclass
class ToolRequest:
    """A call of a caller-executed tool that waits for the caller's answer."""

    id: str = ""
    tool: str = ""
    args: Any = None
    created_at: Optional[_dt.datetime] = _time()
    expires_at: Optional[_dt.datetime] = _time()

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ToolRequest":
        return _load(cls, d)


@dataclasses.dataclass
class ToolCallTrace:
    """One tool call of a program, as it ended; outcome is ok, denied or error."""

    tool: str = ""
    args: Any = None
    outcome: str = ""
    stage: str = ""
    reason: str = ""
    dry_run: bool = False
    start: Optional[_dt.datetime] = _time()
    duration_ms: float = 0.0
    http_status: int = 0
    output_bytes: int = 0

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ToolCallTrace":
        return _load(cls, d)


@dataclasses.dataclass
class RunResult(ExecResult):
    """A program's result: the ExecResult's fields, the sandbox it ran in
    and the trace of its tool calls."""

    sandbox_id: str = ""
    tool_calls: List[ToolCallTrace] = dataclasses.field(default_factory=list)
    tool_calls_dropped: int = 0

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "RunResult":
        err = d.get("error")
        return _load(cls, d, stdout=_output(d, "stdout"), stderr=_output(d, "stderr"),
                     error=err if isinstance(err, str) else "",
                     tool_calls=[ToolCallTrace.from_json(t) for t in _list(d.get("tool_calls")) if isinstance(t, dict)],
                     tool_calls_dropped=int(d.get("tool_calls_dropped") or 0))


def _list(v: Any) -> List[Any]:
    # The exit line of a run's stream has a count where RunResult has the list.
    return v if isinstance(v, list) else []
