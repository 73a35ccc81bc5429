"""The SDK's exceptions: one class per public error code of the API.

Every failure the server reports ({"error":{"code","message"}}, or the
error line that ends a stream) is raised as the subclass of AirlockError
that matches its code; a code this SDK does not know goes by its HTTP
status. Failures on the client's side (a request that timed out, a
connection that could not be made or broke, a response larger than the
SDK accepts) are subclasses of AirlockError too, with ``status`` None.
"""

from __future__ import annotations

import builtins
import json
from typing import Dict, Optional, Type

__all__ = [
    "AirlockError",
    "InvalidArgumentError",
    "UnauthenticatedError",
    "PermissionDeniedError",
    "NotFoundError",
    "ConflictError",
    "AlreadyExistsError",
    "FailedPreconditionError",
    "RequestTooLargeError",
    "RateLimitedError",
    "ResourceExhaustedError",
    "CanceledError",
    "InternalError",
    "NotSupportedError",
    "UnavailableError",
    "BadGatewayError",
    "TimeoutError",
    "APIConnectionError",
    "ResponseTooLargeError",
    "ProtocolError",
    "error_from_response",
    "error_from_detail",
]


class AirlockError(Exception):
    """Base class of every exception the SDK raises.

    code is the API's stable error code ("not_found", ...), status the
    HTTP status (None for a failure on the client's side, and 200 for the
    error line of a stream that broke after it started), message what the
    server said.
    """

    default_code = "internal"

    def __init__(self, message: str, *, code: Optional[str] = None, status: Optional[int] = None,
                 retry_after: Optional[float] = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code or self.default_code
        self.status = status
        self.retry_after = retry_after

    def __str__(self) -> str:
        if self.status is None:
            return "airlock: %s (%s)" % (self.message, self.code)
        return "airlock: %s (%d %s)" % (self.message, self.status, self.code)


class InvalidArgumentError(AirlockError):
    """The request was malformed or a value is out of range (400)."""

    default_code = "invalid_argument"


class UnauthenticatedError(AirlockError):
    """The API key is missing, unknown, expired or revoked (401)."""

    default_code = "unauthenticated"


class PermissionDeniedError(AirlockError):
    """The key lacks the scope, or the sandbox refused the operation (403)."""

    default_code = "permission_denied"


class NotFoundError(AirlockError):
    """No such sandbox (for this tenant), file, process, route... (404)."""

    default_code = "not_found"


class ConflictError(AirlockError):
    """409: the object exists, or is not in a state that allows the
    operation; retrying alone does not help."""

    default_code = "failed_precondition"


class AlreadyExistsError(ConflictError):
    """The object exists already (409 already_exists)."""

    default_code = "already_exists"


class FailedPreconditionError(ConflictError):
    """The object is not in a state that allows the operation, e.g. the
    sandbox is stopped or its disk is full (409 failed_precondition)."""

    default_code = "failed_precondition"


class RequestTooLargeError(AirlockError):
    """The request (body or headers) is larger than the server accepts (413, 431)."""

    default_code = "request_too_large"


class RateLimitedError(AirlockError):
    """Too many requests with this key (429 rate_limited); retry_after says
    when to retry, in seconds."""

    default_code = "rate_limited"


class ResourceExhaustedError(AirlockError):
    """A quota or capacity is used up (429 resource_exhausted)."""

    default_code = "resource_exhausted"


class CanceledError(AirlockError):
    """The request was canceled (499)."""

    default_code = "canceled"


class InternalError(AirlockError):
    """The server failed (500 and other 5xx)."""

    default_code = "internal"


class NotSupportedError(AirlockError):
    """The server does not support what was asked (501)."""

    default_code = "not_supported"


class UnavailableError(AirlockError):
    """The server or the sandbox is temporarily unavailable (503)."""

    default_code = "unavailable"


class BadGatewayError(UnavailableError):
    """Nothing answered on a sandbox's port (502)."""

    default_code = "bad_gateway"


class TimeoutError(AirlockError, builtins.TimeoutError):
    """The operation timed out: on the server (504, 408 timeout), or on the
    client, when a request took longer than its timeout (status None).
    It is also a builtins.TimeoutError."""

    default_code = "timeout"


class APIConnectionError(UnavailableError):
    """The server could not be reached, or the connection broke (client side)."""

    default_code = "unavailable"


class ResponseTooLargeError(AirlockError):
    """A response, or a line of a stream, was larger than the SDK accepts
    (client side)."""

    default_code = "internal"


class ProtocolError(AirlockError):
    """The server answered something this SDK cannot read (client side)."""

    default_code = "internal"


_CODES: Dict[str, Type[AirlockError]] = {
    "invalid_argument": InvalidArgumentError,
    "unauthenticated": UnauthenticatedError,
    "permission_denied": PermissionDeniedError,
    "not_found": NotFoundError,
    "method_not_allowed": InvalidArgumentError,
    "already_exists": AlreadyExistsError,
    "failed_precondition": FailedPreconditionError,
    "request_too_large": RequestTooLargeError,
    "unsupported_media_type": InvalidArgumentError,
    "upgrade_required": InvalidArgumentError,
    "rate_limited": RateLimitedError,
    "resource_exhausted": ResourceExhaustedError,
    "canceled": CanceledError,
    "internal": InternalError,
    "not_supported": NotSupportedError,
    "bad_gateway": BadGatewayError,
    "unavailable": UnavailableError,
    "timeout": TimeoutError,
}


def _class_for_status(status: int) -> Type[AirlockError]:
    if status == 401:
        return UnauthenticatedError
    if status == 403:
        return PermissionDeniedError
    if status == 404:
        return NotFoundError
    if status == 409:
        return ConflictError
    if status in (413, 431):
        return RequestTooLargeError
    if status == 429:
        return RateLimitedError
    if status in (408, 504):
        return TimeoutError
    if status == 501:
        return NotSupportedError
    if status == 502:
        return BadGatewayError
    if status == 503:
        return UnavailableError
    if status >= 500:
        return InternalError
    return InvalidArgumentError


def error_from_detail(code: str, message: str, status: Optional[int],
                      retry_after: Optional[float] = None) -> AirlockError:
    """The exception for an error object {"code","message"}."""
    cls = _CODES.get(code)
    if cls is None:
        cls = _class_for_status(status) if status and status >= 400 else InternalError
    return cls(message or code or "error", code=code or None, status=status, retry_after=retry_after)


def error_from_response(status: int, reason: str, body: bytes,
                        retry_after: Optional[float] = None) -> AirlockError:
    """The exception for an error response: its {"error":{...}} body, or,
    when the body is not the API's error shape (a proxy's page), the
    status with a short message."""
    try:
        doc = json.loads(body.decode("utf-8"))
        detail = doc.get("error") if isinstance(doc, dict) else None
        if isinstance(detail, dict) and isinstance(detail.get("code"), str) and detail["code"]:
            return error_from_detail(detail["code"], str(detail.get("message", "")), status, retry_after)
    except (ValueError, UnicodeDecodeError):
        pass
    cls = _class_for_status(status)
    msg = reason or ("unexpected status %d" % status)
    text = body.decode("utf-8", "replace").strip()
    if text and len(text) < 200:
        msg += ": " + text
    return cls(msg, code=cls.default_code, status=status, retry_after=retry_after)
