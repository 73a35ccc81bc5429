"""The HTTP transport: one connection per request over http.client, with
timeouts on every socket operation, retries where they are safe, chunked
uploads from file objects and streamed responses (raw bytes, NDJSON).
"""

from __future__ import annotations

import http.client
import json
import random
import socket
import ssl
import time
import urllib.parse
from typing import Any, Dict, Iterator, Mapping, Optional, Sequence, Union

from . import errors

# Caps on what the client buffers: a JSON response, an error body, a
# line of a stream.
MAX_RESPONSE_BYTES = 16 << 20
MAX_ERROR_BYTES = 64 << 10
MAX_STREAM_LINE = 32 << 20

# Chunk size of uploads and downloads.
CHUNK_SIZE = 1 << 20

# The longest Retry-After the client waits out before retrying; a longer
# one raises at once.
MAX_RETRY_WAIT = 10.0

Body = Union[None, bytes, bytearray, memoryview, str, Any]
Query = Optional[Mapping[str, Any]]

_IDEMPOTENT = ("GET", "HEAD")


def _retry_after(value: Optional[str]) -> Optional[float]:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def _encode_query(query: Query) -> str:
    if not query:
        return ""
    pairs = []
    for k, v in query.items():
        if v is None:
            continue
        if isinstance(v, (list, tuple)):
            for item in v:
                pairs.append((k, _scalar(item)))
        else:
            pairs.append((k, _scalar(v)))
    return urllib.parse.urlencode(pairs)


def _scalar(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _chunks(body: Any) -> Iterator[bytes]:
    """The pieces of a streamed body: a file object read CHUNK_SIZE at a
    time (text encoded as UTF-8), or an iterable of bytes or str."""
    read = getattr(body, "read", None)
    if read is not None:
        while True:
            b = read(CHUNK_SIZE)
            if not b:
                return
            yield b.encode("utf-8") if isinstance(b, str) else bytes(b) if not isinstance(b, bytes) else b
    else:
        for b in body:
            if b:
                yield b.encode("utf-8") if isinstance(b, str) else bytes(b)


class Response:
    """An open response whose body the caller reads; close() ends the
    request (the connection is not reused)."""

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse, what: str) -> None:
        self._conn = conn
        self.raw = resp
        self.status = resp.status
        self.headers = resp.headers
        self.what = what
        self.closed = False

    def read(self, n: int = -1) -> bytes:
        """Up to n bytes of the body (all of it with n < 0); b"" at its end."""
        try:
            if n is None or n < 0:
                return self.raw.read()
            return self.raw.read1(n) if n > 0 else b""
        except Exception as e:  # noqa: BLE001 - mapped to the SDK's classes
            raise self._broken(e) from e

    def readinto(self, buf: Any) -> int:
        try:
            return self.raw.readinto(buf)
        except Exception as e:  # noqa: BLE001
            raise self._broken(e) from e

    def read_json(self, limit: int = MAX_RESPONSE_BYTES) -> Any:
        b = self._read_capped(limit)
        try:
            return json.loads(b.decode("utf-8")) if b else None
        except ValueError as e:
            raise errors.ProtocolError("%s: the response is not JSON: %s" % (self.what, e)) from e

    def _read_capped(self, limit: int) -> bytes:
        # In small reads: HTTPResponse.read(n) of Python 3.9 allocates and
        # zeroes n bytes, whatever the body's size.
        if self.raw.length is not None and self.raw.length > limit:
            raise errors.ResponseTooLargeError("%s: the response is larger than %d bytes" % (self.what, limit))
        buf = bytearray()
        while True:
            try:
                b = self.raw.read(min(64 << 10, limit + 1 - len(buf)))
            except Exception as e:  # noqa: BLE001
                raise self._broken(e) from e
            if not b:
                return bytes(buf)
            buf += b
            if len(buf) > limit:
                raise errors.ResponseTooLargeError("%s: the response is larger than %d bytes" % (self.what, limit))

    def lines(self, limit: int = MAX_STREAM_LINE) -> Iterator[Dict[str, Any]]:
        """The NDJSON lines of the body, decoded, until its end."""
        while True:
            try:
                line = self.raw.readline(limit + 1)
            except Exception as e:  # noqa: BLE001
                raise self._broken(e) from e
            if not line:
                return
            if len(line) > limit and not line.endswith(b"\n"):
                raise errors.ResponseTooLargeError("%s: a line is longer than %d bytes" % (self.what, limit))
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line.decode("utf-8"))
            except ValueError as e:
                raise errors.ProtocolError("%s: malformed line: %s" % (self.what, e)) from e
            if not isinstance(obj, dict):
                raise errors.ProtocolError("%s: malformed line: not an object" % self.what)
            yield obj

    def _broken(self, e: BaseException) -> errors.AirlockError:
        if isinstance(e, errors.AirlockError):
            return e
        if isinstance(e, socket.timeout):
            return errors.TimeoutError("%s: no data from the server within the timeout" % self.what)
        if self.closed:
            return errors.CanceledError("%s: closed" % self.what)
        return errors.APIConnectionError("%s: the transfer broke: %s" % (self.what, e or type(e).__name__))

    def close(self) -> None:
        """Ends the request. Safe to call from another thread while a
        read blocks: the read then fails."""
        if self.closed:
            return
        self.closed = True
        sock = self._conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        try:
            self.raw.close()
        finally:
            self._conn.close()

    def __enter__(self) -> "Response":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Transport:
    """Sends requests to one server with one API key."""

    def __init__(self, base_url: str, api_key: str, timeout: float, max_retries: int, user_agent: str) -> None:
        u = urllib.parse.urlsplit(base_url.rstrip("/"))
        if u.scheme not in ("http", "https") or not u.hostname:
            raise errors.InvalidArgumentError("base URL %r must be http(s)://host[:port]" % base_url)
        if u.query or u.fragment:
            raise errors.InvalidArgumentError("base URL %r must not have a query or fragment" % base_url)
        if not api_key or any(c in api_key for c in " \r\n\t"):
            raise errors.InvalidArgumentError("the API key is empty or contains white space")
        if timeout is None or timeout <= 0:
            raise errors.InvalidArgumentError("timeout must be a positive number of seconds")
        self.scheme = u.scheme
        self.host = u.hostname
        self.port = u.port
        self.prefix = u.path.rstrip("/")
        self.api_key = api_key
        self.timeout = float(timeout)
        self.max_retries = max(0, int(max_retries))
        self.user_agent = user_agent
        self.ssl_context: Optional[ssl.SSLContext] = ssl.create_default_context() if u.scheme == "https" else None

    def _conn(self, timeout: float) -> http.client.HTTPConnection:
        if self.scheme == "https":
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout, context=self.ssl_context)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def _backoff(self, attempt: int) -> float:
        return min(2.0, 0.1 * (2 ** attempt)) * (0.5 + random.random() / 2)

    def open(self, method: str, path: str, *, query: Query = None, json_body: Any = None, body: Body = None,
             headers: Optional[Mapping[str, str]] = None, timeout: Optional[float] = None,
             expect: Sequence[int] = (200,)) -> Response:
        """Sends a request and returns the open response when its status is
        one of expect; any other status raises the matching AirlockError.

        timeout bounds the connect and every read and write on the socket
        (default: the client's). A GET is retried on connection errors and
        on 503 (or 429 rate_limited) with a short Retry-After; any request
        is retried when the connection could not be made, since nothing
        was sent.
        """
        target = self.prefix + path
        qs = _encode_query(query)
        if qs:
            target += "?" + qs
        what = "%s %s" % (method, path)
        hdrs: Dict[str, str] = {"Authorization": "Bearer " + self.api_key, "User-Agent": self.user_agent}
        if json_body is not None:
            body = json.dumps(json_body, separators=(",", ":")).encode("utf-8")
            hdrs["Content-Type"] = "application/json"
        if isinstance(body, str):
            body = body.encode("utf-8")
        if headers:
            hdrs.update(headers)
        t = self.timeout if timeout is None else float(timeout)
        idempotent = method in _IDEMPOTENT
        attempt = 0
        while True:
            conn = self._conn(t)
            try:
                conn.connect()
            except socket.timeout as e:
                conn.close()
                if attempt < self.max_retries:
                    attempt += 1
                    time.sleep(self._backoff(attempt))
                    continue
                raise errors.TimeoutError("%s: connecting timed out after %gs" % (what, t)) from e
            except OSError as e:
                conn.close()
                if attempt < self.max_retries:
                    attempt += 1
                    time.sleep(self._backoff(attempt))
                    continue
                raise errors.APIConnectionError("%s: cannot connect: %s" % (what, e)) from e
            try:
                resp = self._send(conn, method, target, hdrs, body, what)
            except errors.AirlockError:
                conn.close()
                raise
            except socket.timeout as e:
                conn.close()
                raise errors.TimeoutError("%s: no answer within %gs" % (what, t)) from e
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                if idempotent and attempt < self.max_retries:
                    attempt += 1
                    time.sleep(self._backoff(attempt))
                    continue
                raise errors.APIConnectionError("%s: %s" % (what, e or type(e).__name__)) from e
            if resp.status in expect:
                return Response(conn, resp, what)
            try:
                raw = resp.read(MAX_ERROR_BYTES)
            except Exception:  # noqa: BLE001 - the status is what counts
                raw = b""
            finally:
                conn.close()
            ra = _retry_after(resp.getheader("Retry-After"))
            err = errors.error_from_response(resp.status, resp.reason, raw, ra)
            retryable = resp.status == 503 or isinstance(err, errors.RateLimitedError)
            if idempotent and retryable and ra is not None and ra <= MAX_RETRY_WAIT and attempt < self.max_retries:
                attempt += 1
                time.sleep(ra)
                continue
            raise err

    def _send(self, conn: http.client.HTTPConnection, method: str, target: str, hdrs: Dict[str, str],
              body: Body, what: str) -> http.client.HTTPResponse:
        conn.putrequest(method, target, skip_accept_encoding=True)
        for k, v in hdrs.items():
            conn.putheader(k, v)
        if body is None:
            if method in ("POST", "PUT", "PATCH"):
                conn.putheader("Content-Length", "0")
            conn.endheaders()
            return conn.getresponse()
        if isinstance(body, (bytes, bytearray, memoryview)):
            conn.putheader("Content-Length", str(len(body)))
            conn.endheaders()
            try:
                conn.send(bytes(body) if not isinstance(body, bytes) else body)
            except OSError:
                return self._early_answer(conn, what)
            return conn.getresponse()
        conn.putheader("Transfer-Encoding", "chunked")
        conn.endheaders()
        try:
            for chunk in _chunks(body):
                conn.send(b"%X\r\n" % len(chunk))
                conn.send(chunk)
                conn.send(b"\r\n")
            conn.send(b"0\r\n\r\n")
        except OSError:
            return self._early_answer(conn, what)
        return conn.getresponse()

    @staticmethod
    def _early_answer(conn: http.client.HTTPConnection, what: str) -> http.client.HTTPResponse:
        """The answer the server sent before it stopped reading the body
        (an error, say 413 or 404), or a connection error."""
        try:
            resp = conn.getresponse()
        except Exception as e:  # noqa: BLE001
            raise errors.APIConnectionError("%s: the connection broke while sending the body" % what) from e
        if resp.status < 400:
            raise errors.APIConnectionError("%s: the connection broke while sending the body" % what)
        return resp

    def json(self, method: str, path: str, *, query: Query = None, body: Any = None,
             timeout: Optional[float] = None, expect: int = 200) -> Any:
        """A JSON request whose JSON answer (status expect) is returned
        decoded; None for an empty answer (204)."""
        hdrs = {"Accept": "application/json"}
        with self.open(method, path, query=query, json_body=body, headers=hdrs, timeout=timeout,
                       expect=(expect,)) as r:
            return r.read_json()

    def stream(self, method: str, path: str, *, query: Query = None, body: Any = None,
               timeout: Optional[float] = None) -> Response:
        """An NDJSON request: the open response, whose lines() the caller reads."""
        hdrs = {"Accept": "application/x-ndjson"}
        return self.open(method, path, query=query, json_body=body, headers=hdrs, timeout=timeout)


def stream_error(line: Mapping[str, Any], fallback: str) -> errors.AirlockError:
    """The exception of a stream's error line {"type":"error","error":{...}}."""
    d = line.get("error")
    if isinstance(d, dict) and d.get("code"):
        return errors.error_from_detail(str(d["code"]), str(d.get("message", "")), 200)
    return errors.InternalError(fallback, status=200)


def path_escape(s: str) -> str:
    return urllib.parse.quote(s, safe="")


def check_id(what: str, value: Any) -> str:
    if not isinstance(value, str) or not value or any(c in value for c in "/?#"):
        raise errors.InvalidArgumentError("%s %r is not valid" % (what, value))
    return value

