// Typed errors: one class per public error code of the API (api/errors.go,
// the Error schema of openapi.yaml), all subclasses of AirlockError.

/** The stable public error codes of the API (the Error schema's enum). */
export type ErrorCode =
  | "invalid_argument"
  | "unauthenticated"
  | "permission_denied"
  | "not_found"
  | "method_not_allowed"
  | "already_exists"
  | "failed_precondition"
  | "request_too_large"
  | "unsupported_media_type"
  | "upgrade_required"
  | "rate_limited"
  | "resource_exhausted"
  | "canceled"
  | "internal"
  | "not_supported"
  | "bad_gateway"
  | "unavailable"
  | "timeout";

/**
 * An error of an Airlock call: an error response of the server
 * (`{"error":{"code","message"}}`), an error line of a stream, or a
 * client-side failure (a timeout, a connection that failed, a response
 * too large). `code` is the API's code; `status` the HTTP status, 200 for
 * a stream that broke after it started and 0 when no response came.
 */
export class AirlockError extends Error {
  /** The API's error code, e.g. "not_found". */
  readonly code: ErrorCode | string;
  /** The HTTP status; 0 when the error arose in the client. */
  readonly status: number;

  constructor(message: string, code: ErrorCode | string, status: number, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.status = status;
    this.name = new.target.name;
  }
}

/** 400 invalid_argument: a malformed request or a value out of range. */
export class InvalidArgumentError extends AirlockError {}
/** 401 unauthenticated: the API key is missing or not valid. */
export class UnauthenticatedError extends AirlockError {}
/** 403 permission_denied: the key lacks the scope, or the sandbox refused. */
export class PermissionDeniedError extends AirlockError {}
/** 404 not_found: no such sandbox (for this tenant), file, tool or route. */
export class NotFoundError extends AirlockError {}
/** 405 method_not_allowed. */
export class MethodNotAllowedError extends AirlockError {}
/** 409 already_exists: the object exists already. */
export class AlreadyExistsError extends AirlockError {}
/**
 * 409 failed_precondition: the object is not in a state that allows the
 * operation (the sandbox ended, its disk is full); retrying alone does
 * not help.
 */
export class FailedPreconditionError extends AirlockError {}
/** 413 request_too_large. */
export class RequestTooLargeError extends AirlockError {}
/** 415 unsupported_media_type. */
export class UnsupportedMediaTypeError extends AirlockError {}
/** 426 upgrade_required: a WebSocket route asked without the upgrade. */
export class UpgradeRequiredError extends AirlockError {}

/** The base of the errors that may carry the server's `Retry-After` (429, 503). */
export class RetryableError extends AirlockError {
  /** The server's Retry-After in milliseconds, when it sent one. */
  retryAfterMs?: number;
}

/** 429 rate_limited: too many requests with this key; retry later. */
export class RateLimitedError extends RetryableError {}
/** 429 resource_exhausted: a quota or capacity is used up. */
export class ResourceExhaustedError extends RetryableError {}
/** 499 canceled: the server saw the client go away. */
export class CanceledError extends AirlockError {}
/** 500 internal: the server failed. */
export class InternalError extends AirlockError {}
/** 501 not_supported. */
export class NotSupportedError extends AirlockError {}
/** 502 bad_gateway: nothing answered on a sandbox's port. */
export class BadGatewayError extends AirlockError {}
/** 503 unavailable: the server or the sandbox is unavailable for now. */
export class UnavailableError extends RetryableError {}
/**
 * The server could not be reached or the connection broke (status 0,
 * code "unavailable").
 */
export class ConnectionError extends UnavailableError {}
/**
 * timeout: the server timed the operation out (504, 408), or the call
 * ran past its client-side timeout (status 0; `clientSide` is true).
 */
export class TimeoutError extends AirlockError {
  /** True when the client's own timeout (timeoutMs) ended the call. */
  get clientSide(): boolean {
    return this.status === 0;
  }
}
/** A response (or a stream's line) larger than the client accepts. */
export class ResponseTooLargeError extends AirlockError {}

type ErrorClass = new (message: string, code: string, status: number, options?: { cause?: unknown }) => AirlockError;

const byCode: Record<ErrorCode, ErrorClass> = {
  invalid_argument: InvalidArgumentError,
  unauthenticated: UnauthenticatedError,
  permission_denied: PermissionDeniedError,
  not_found: NotFoundError,
  method_not_allowed: MethodNotAllowedError,
  already_exists: AlreadyExistsError,
  failed_precondition: FailedPreconditionError,
  request_too_large: RequestTooLargeError,
  unsupported_media_type: UnsupportedMediaTypeError,
  upgrade_required: UpgradeRequiredError,
  rate_limited: RateLimitedError,
  resource_exhausted: ResourceExhaustedError,
  canceled: CanceledError,
  internal: InternalError,
  not_supported: NotSupportedError,
  bad_gateway: BadGatewayError,
  unavailable: UnavailableError,
  timeout: TimeoutError,
};

/** The code an error response without the API's body gets, by status. */
function codeOfStatus(status: number): ErrorCode {
  switch (status) {
    case 401:
      return "unauthenticated";
    case 403:
      return "permission_denied";
    case 404:
      return "not_found";
    case 405:
      return "method_not_allowed";
    case 408:
    case 504:
      return "timeout";
    case 409:
      return "failed_precondition";
    case 413:
      return "request_too_large";
    case 415:
      return "unsupported_media_type";
    case 429:
      return "rate_limited";
    case 501:
      return "not_supported";
    case 502:
      return "bad_gateway";
    case 503:
      return "unavailable";
  }
  return status >= 500 ? "internal" : "invalid_argument";
}

/**
 * The typed error for code (or, when code is not one this SDK knows, for
 * status) with message.
 */
export function errorFor(status: number, code: string | undefined, message: string, retryAfterMs?: number): AirlockError {
  const known = code !== undefined && Object.hasOwn(byCode, code);
  const cls = byCode[known ? (code as ErrorCode) : codeOfStatus(status)];
  const err = new cls(message, code || codeOfStatus(status), status);
  if (err instanceof RetryableError && retryAfterMs !== undefined) {
    err.retryAfterMs = retryAfterMs;
  }
  return err;
}

/** Parses the API's error body; a body of another shape keeps the status. */
export function errorFromBody(status: number, statusText: string, body: string, retryAfterMs?: number): AirlockError {
  try {
    const parsed = JSON.parse(body) as { error?: { code?: unknown; message?: unknown } };
    const e = parsed?.error;
    if (e && typeof e.code === "string" && e.code !== "") {
      return errorFor(status, e.code, typeof e.message === "string" ? e.message : e.code, retryAfterMs);
    }
  } catch {
    // Not JSON: a proxy's page.
  }
  let msg = statusText || `unexpected status ${status}`;
  const t = body.trim();
  if (t !== "" && t.length < 200) {
    msg += `: ${t}`;
  }
  return errorFor(status, undefined, msg, retryAfterMs);
}

/** An invalid argument found before any request was sent. */
export function invalid(message: string): InvalidArgumentError {
  return new InvalidArgumentError(`airlock: ${message}`, "invalid_argument", 0);
}
