"""Airlock's Python SDK: sandboxes, commands, processes, files, code
contexts, templates, keys, tools and programs that call them, over the
REST API (v1). Standard library only.

    import airlock

    with airlock.Client() as c:          # AIRLOCK_URL, AIRLOCK_API_KEY
        sb = c.create_sandbox()
        try:
            print(c.exec(sb.id, "echo hi").stdout_text)
        finally:
            c.delete_sandbox(sb.id)

airlock.AsyncClient has the same surface for asyncio. Failures raise
subclasses of airlock.AirlockError, one per API error code.
"""

from .aio import AsyncClient, AsyncCodeStream, AsyncExecStream, AsyncFileReader, AsyncStatsStream, AsyncWatchStream
from .anthropic import ANTHROPIC_TOOLS, PROGRAM_TOOL, AnthropicExecutor, AsyncAnthropicExecutor
from .openai import OPENAI_TOOLS, AsyncOpenAIExecutor, OpenAIExecutor
from .client import DEFAULT_TIMEOUT, Client, CodeStream, ExecStream, FileReader, StatsStream, ToolFunc, WatchStream
from .errors import (AirlockError, AlreadyExistsError, APIConnectionError, BadGatewayError, CanceledError,
                     ConflictError, FailedPreconditionError, InternalError, InvalidArgumentError, NotFoundError,
                     NotSupportedError, PermissionDeniedError, ProtocolError, RateLimitedError, RequestTooLargeError,
                     ResourceExhaustedError, ResponseTooLargeError, TimeoutError, UnauthenticatedError,
                     UnavailableError)
from .models import (Approval, CodeContext, CodeError, CodeEvent, CodeExecution, CodeOutput, CodeResult, CreatedKey,
                     DirListing, ExecEvent, ExecExit, ExecOutput, ExecResult, ExecStart, FileInfo, Key, ProcessList,
                     RunResult, Sandbox, SandboxProcess, SandboxStats, StatsCPU, StatsDisk, StatsMemory, StatsNetwork,
                     StatsPids, Template, TemplateDetail, TemplateList, Tool, ToolCallTrace, ToolRequest, Toolset,
                     WatchEvent, WhoAmI)

__version__ = "0.1.0"

__all__ = [
    "Client", "AsyncClient", "DEFAULT_TIMEOUT", "ToolFunc",
    "AnthropicExecutor", "AsyncAnthropicExecutor", "ANTHROPIC_TOOLS", "PROGRAM_TOOL",
    "OpenAIExecutor", "AsyncOpenAIExecutor", "OPENAI_TOOLS",
    "ExecStream", "CodeStream", "WatchStream", "StatsStream", "FileReader",
    "AsyncExecStream", "AsyncCodeStream", "AsyncWatchStream", "AsyncStatsStream", "AsyncFileReader",
    "AirlockError", "InvalidArgumentError", "UnauthenticatedError", "PermissionDeniedError", "NotFoundError",
    "ConflictError", "AlreadyExistsError", "FailedPreconditionError", "RequestTooLargeError", "RateLimitedError",
    "ResourceExhaustedError", "CanceledError", "InternalError", "NotSupportedError", "UnavailableError",
    "BadGatewayError", "TimeoutError", "APIConnectionError", "ResponseTooLargeError", "ProtocolError",
    "Sandbox", "ExecResult", "ExecStart", "ExecOutput", "ExecExit", "ExecEvent", "SandboxProcess", "ProcessList",
    "FileInfo", "DirListing", "WatchEvent", "CodeResult", "CodeError", "CodeOutput", "CodeExecution", "CodeEvent",
    "CodeContext", "Template", "TemplateDetail", "TemplateList", "Key", "CreatedKey", "WhoAmI", "Tool", "Toolset",
    "Approval", "ToolRequest", "ToolCallTrace", "RunResult",
    "SandboxStats", "StatsCPU", "StatsMemory", "StatsPids", "StatsDisk", "StatsNetwork",
]
