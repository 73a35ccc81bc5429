"""The SDK's transport against a scripted HTTP server on loopback (no
daemon needed): which requests are retried, error bodies mapped to
exceptions, chunked uploads, and a download cut midway."""

from __future__ import annotations

import http.server
import json
import threading
import unittest
from typing import Any, Callable, Dict, List, Tuple

import airlock

Handler = Callable[["_Req", int], Any]


class _Req(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "_Server"

    def log_message(self, *args: Any) -> None:
        pass

    def _handle(self) -> None:
        n = self.server.count(self.command, self.path)
        self.server.routes[(self.command, self.path.split("?")[0])](self, n)

    do_GET = do_POST = do_PUT = do_DELETE = _handle

    def reply(self, status: int, body: Any = None, headers: Dict[str, str] = None) -> None:
        raw = json.dumps(body).encode() if body is not None else b""
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def read_chunked(self) -> List[int]:
        sizes = []
        while True:
            n = int(self.rfile.readline().strip(), 16)
            if n == 0:
                self.rfile.readline()
                return sizes
            self.rfile.read(n)
            self.rfile.readline()
            sizes.append(n)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Req)
        self.routes: Dict[Tuple[str, str], Handler] = {}
        self.hits: Dict[Tuple[str, str], int] = {}
        self.lock = threading.Lock()

    def count(self, method: str, path: str) -> int:
        key = (method, path.split("?")[0])
        with self.lock:
            self.hits[key] = self.hits.get(key, 0) + 1
            return self.hits[key]


def _err(code: str) -> Dict[str, Any]:
    return {"error": {"code": code, "message": "scripted " + code}}


SANDBOX = {"id": "sb-1", "state": "running", "template": "host", "limits": {}, "metadata": {},
           "created_at": "2026-01-02T03:04:05.123456789Z", "expires_at": "2026-01-02T04:04:05Z",
           "max_expires_at": "2026-01-03T03:04:05+02:00", "last_activity_at": "2026-01-02T03:04:05Z"}


class TransportTest(unittest.TestCase):
    def setUp(self) -> None:
        self.srv = _Server()
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        self.c = airlock.Client("http://127.0.0.1:%d" % self.srv.server_address[1], "k", timeout=5)

    def tearDown(self) -> None:
        self.srv.shutdown()
        self.srv.server_close()

    def route(self, method: str, path: str, fn: Handler) -> None:
        self.srv.routes[(method, path)] = fn

    def hits(self, method: str, path: str) -> int:
        return self.srv.hits.get((method, path), 0)

    def test_get_retried_on_503_with_retry_after(self) -> None:
        def h(r: _Req, n: int) -> None:
            if n == 1:
                r.reply(503, _err("unavailable"), {"Retry-After": "0"})
            else:
                r.reply(200, SANDBOX)
        self.route("GET", "/v1/sandboxes/sb-1", h)
        sb = self.c.get_sandbox("sb-1")
        self.assertEqual(sb.id, "sb-1")
        self.assertEqual(self.hits("GET", "/v1/sandboxes/sb-1"), 2)
        self.assertEqual(sb.created_at.microsecond, 123456)
        self.assertEqual(sb.max_expires_at.utcoffset().total_seconds(), 7200)

    def test_get_not_retried_without_retry_after_or_past_the_cap(self) -> None:
        self.route("GET", "/v1/sandboxes/sb-1", lambda r, n: r.reply(503, _err("unavailable")))
        with self.assertRaises(airlock.UnavailableError):
            self.c.get_sandbox("sb-1")
        self.assertEqual(self.hits("GET", "/v1/sandboxes/sb-1"), 1)
        self.route("GET", "/v1/sandboxes", lambda r, n: r.reply(503, _err("unavailable"), {"Retry-After": "3600"}))
        with self.assertRaises(airlock.UnavailableError) as cm:
            self.c.list_sandboxes()
        self.assertEqual(cm.exception.retry_after, 3600)
        self.assertEqual(self.hits("GET", "/v1/sandboxes"), 1)

    def test_post_never_retried(self) -> None:
        self.route("POST", "/v1/sandboxes/sb-1/exec",
                   lambda r, n: r.reply(503, _err("unavailable"), {"Retry-After": "0"}))
        with self.assertRaises(airlock.UnavailableError):
            self.c.exec("sb-1", "true")
        self.assertEqual(self.hits("POST", "/v1/sandboxes/sb-1/exec"), 1)

        def drop(r: _Req, n: int) -> None:
            r.close_connection = True
            r.connection.shutdown(2)
        self.route("POST", "/v1/sandboxes", drop)
        with self.assertRaises(airlock.APIConnectionError):
            self.c.create_sandbox()
        self.assertEqual(self.hits("POST", "/v1/sandboxes"), 1)

    def test_get_retried_when_the_connection_drops(self) -> None:
        def h(r: _Req, n: int) -> None:
            if n == 1:
                r.close_connection = True
                r.connection.shutdown(2)
            else:
                r.reply(200, {"sandboxes": [SANDBOX]})
        self.route("GET", "/v1/sandboxes", h)
        self.assertEqual([s.id for s in self.c.list_sandboxes()], ["sb-1"])
        self.assertEqual(self.hits("GET", "/v1/sandboxes"), 2)

    def test_connection_refused(self) -> None:
        c = airlock.Client("http://127.0.0.1:1", "k", timeout=1, max_retries=1)
        with self.assertRaises(airlock.APIConnectionError):
            c.create_sandbox()

    def test_codes_map_to_classes(self) -> None:
        cases = [
            (400, "invalid_argument", airlock.InvalidArgumentError), (401, "unauthenticated", airlock.UnauthenticatedError),
            (403, "permission_denied", airlock.PermissionDeniedError), (404, "not_found", airlock.NotFoundError),
            (409, "already_exists", airlock.AlreadyExistsError), (409, "failed_precondition", airlock.FailedPreconditionError),
            (413, "request_too_large", airlock.RequestTooLargeError), (429, "rate_limited", airlock.RateLimitedError),
            (429, "resource_exhausted", airlock.ResourceExhaustedError), (500, "internal", airlock.InternalError),
            (501, "not_supported", airlock.NotSupportedError), (502, "bad_gateway", airlock.BadGatewayError),
            (503, "unavailable", airlock.UnavailableError), (504, "timeout", airlock.TimeoutError),
            (418, "teapot_unknown", airlock.InvalidArgumentError), (409, "", airlock.ConflictError),
        ]
        for status, code, cls in cases:
            with self.subTest(code=code):
                body = _err(code) if code else None
                self.route("POST", "/v1/sandboxes/sb-1/timeout", lambda r, n, s=status, b=body: r.reply(s, b))
                with self.assertRaises(cls) as cm:
                    self.c.set_timeout("sb-1", 60)
                self.assertEqual(cm.exception.status, status)
                if code:
                    self.assertEqual(cm.exception.code, code)
                    self.assertEqual(cm.exception.message, "scripted " + code)
        self.assertTrue(issubclass(airlock.FailedPreconditionError, airlock.ConflictError))

    def test_stream_error_line(self) -> None:
        def h(r: _Req, n: int) -> None:
            lines = [{"type": "start", "pid": 7}, {"type": "stdout", "data": "x"},
                     {"type": "error", "error": {"code": "unavailable", "message": "sandbox died"}}]
            raw = b"".join(json.dumps(x).encode() + b"\n" for x in lines)
            r.send_response(200)
            r.send_header("Content-Length", str(len(raw)))
            r.end_headers()
            r.wfile.write(raw)
        self.route("POST", "/v1/sandboxes/sb-1/exec", h)
        s = self.c.exec_stream("sb-1", "x")
        self.assertEqual(next(s).pid, 7)
        self.assertEqual(next(s).data, b"x")
        with self.assertRaises(airlock.UnavailableError) as cm:
            next(s)
        self.assertEqual(cm.exception.message, "sandbox died")

    def test_upload_is_chunked(self) -> None:
        got: Dict[str, Any] = {}

        def h(r: _Req, n: int) -> None:
            got["te"] = r.headers.get("Transfer-Encoding")
            got["sizes"] = r.read_chunked()
            r.reply(200, {"name": "f", "path": "/home/user/f", "type": "file", "size": sum(got["sizes"]),
                          "mode": 420, "uid": 1000, "gid": 1000, "mod_time": "2026-01-02T03:04:05Z", "sha256": "x"})
        self.route("PUT", "/v1/sandboxes/sb-1/files", h)
        import io
        info = self.c.write_file("sb-1", "f", io.BytesIO(b"z" * (3 * (1 << 20) + 5)))
        self.assertEqual(got["te"], "chunked")
        self.assertEqual(got["sizes"], [1 << 20, 1 << 20, 1 << 20, 5])
        self.assertEqual(info.size, 3 * (1 << 20) + 5)

    def test_download_cut_midway_raises(self) -> None:
        def h(r: _Req, n: int) -> None:
            r.send_response(200)
            r.send_header("Transfer-Encoding", "chunked")
            r.end_headers()
            r.wfile.write(b"5\r\nhello\r\n")  # and no last chunk
            r.wfile.flush()
            r.close_connection = True
        self.route("GET", "/v1/sandboxes/sb-1/files", h)
        with self.assertRaises(airlock.APIConnectionError):
            with self.c.read_file("sb-1", "f") as f:
                f.read()

    def test_bad_arguments_refused_locally(self) -> None:
        with self.assertRaises(airlock.InvalidArgumentError):
            airlock.Client("ftp://x", "k")
        with self.assertRaises(airlock.InvalidArgumentError):
            airlock.Client("http://x", "")
        with self.assertRaises(airlock.InvalidArgumentError):
            self.c.exec("sb-1", [])
        with self.assertRaises(airlock.InvalidArgumentError):
            self.c.signal_process("sb-1", -1)
        self.assertEqual(self.srv.hits, {})


if __name__ == "__main__":
    unittest.main()
