#!/usr/bin/env python3
"""A minimal agent server to run inside an Airlock sandbox (standard library only).

It serves, on 127.0.0.1:AGENT_PORT (default 8080) of the sandbox:
  GET  /health  -> {"ok": true}
  POST /task    {"prompt": "..."} -> {"answer": "..."}
  GET  /ws      a WebSocket: each text message is a prompt, each answer a text
                message {"answer": "..."} (or {"error": "..."}).
Airlock's port proxy reaches it from outside; nothing else can.

For each task it calls an Anthropic-Messages-style API at MODEL_URL (default
https://api.anthropic.com/v1/messages) through the sandbox's egress proxy
(HTTPS_PROXY, set by Airlock in allowlist mode) and sends NO API key: the
proxy adds the key as it leaves, from a secret the sandbox never sees.
"""
import base64
import hashlib
import json
import os
import struct
import sys
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL_URL = os.environ.get("MODEL_URL", "https://api.anthropic.com/v1/messages")
MODEL = os.environ.get("MODEL", "claude-sonnet-4-5")
MAX_BODY = 64 << 10  # the largest request body or WebSocket message taken
WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def ask_model(prompt):
    """Sends one user message to the model and returns its text."""
    body = json.dumps({"model": MODEL, "max_tokens": 1024,
                       "messages": [{"role": "user", "content": prompt}]}).encode()
    # No x-api-key: the egress proxy sets it. urllib takes HTTPS_PROXY from
    # the environment and verifies TLS against SSL_CERT_FILE (Airlock's bundle).
    req = urllib.request.Request(MODEL_URL, data=body, method="POST", headers={
        "content-type": "application/json", "anthropic-version": "2023-06-01"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            msg = json.loads(resp.read(1 << 20))
    except urllib.error.HTTPError as e:
        raise RuntimeError("model API: HTTP %d: %s" % (e.code, e.read(1000).decode(errors="replace")))
    return "".join(b.get("text", "") for b in msg.get("content", []) if b.get("type") == "text")


def answer(prompt):
    """The JSON-able answer to one task."""
    if not isinstance(prompt, str) or not prompt:
        return {"error": "want a non-empty prompt"}
    try:
        return {"answer": ask_model(prompt)}
    except Exception as e:  # the caller gets the reason, the agent goes on
        return {"error": str(e)}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        sys.stderr.write("agent: " + fmt % args + "\n")

    def reply(self, status, obj):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/health":
            return self.reply(200, {"ok": True})
        if self.path == "/ws" and self.headers.get("Upgrade", "").lower() == "websocket":
            return self.websocket()
        self.reply(404, {"error": "not found"})

    def do_POST(self):
        if self.path != "/task":
            return self.reply(404, {"error": "not found"})
        n = int(self.headers.get("Content-Length") or 0)
        if n <= 0 or n > MAX_BODY:
            return self.reply(400, {"error": "want a JSON body of 1 B-64 KiB"})
        try:
            prompt = json.loads(self.rfile.read(n)).get("prompt")
        except (ValueError, AttributeError):
            return self.reply(400, {"error": "want a JSON object"})
        out = answer(prompt)
        self.reply(502 if "error" in out else 200, out)

    # WebSocket (RFC 6455): the handshake, then unfragmented frames.
    def websocket(self):
        key = self.headers.get("Sec-WebSocket-Key", "")
        accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True
        while True:
            op, data = self.read_frame()
            if op is None or op == 8:  # gone, or a close: answer it and end
                self.send_frame(8, data[:2] if data else b"")
                return
            if op == 9:  # ping
                self.send_frame(10, data)
            elif op == 1:
                try:
                    prompt = json.loads(data).get("prompt")
                except (ValueError, AttributeError):
                    prompt = None
                self.send_frame(1, json.dumps(answer(prompt)).encode())
            elif op != 10:  # binary or a fragment: not spoken here (1003)
                self.send_frame(8, struct.pack(">H", 1003))
                return

    def read_frame(self):
        h = self.rfile.read(2)
        if len(h) < 2:
            return None, b""
        fin, op, masked, n = h[0] & 0x80, h[0] & 0x0F, h[1] & 0x80, h[1] & 0x7F
        if n == 126:
            n = struct.unpack(">H", self.rfile.read(2))[0]
        elif n == 127:
            n = struct.unpack(">Q", self.rfile.read(8))[0]
        if not masked or n > MAX_BODY:  # a client must mask; cap the size
            return None, struct.pack(">H", 1002 if not masked else 1009)
        mask = self.rfile.read(4)
        data = bytes(b ^ mask[i % 4] for i, b in enumerate(self.rfile.read(n)))
        return (op if fin else 0), data

    def send_frame(self, op, data):
        n = len(data)
        head = bytes([0x80 | op])
        if n < 126:
            head += bytes([n])
        elif n < 65536:
            head += bytes([126]) + struct.pack(">H", n)
        else:
            head += bytes([127]) + struct.pack(">Q", n)
        self.wfile.write(head + data)
        self.wfile.flush()


if __name__ == "__main__":
    port = int(os.environ.get("AGENT_PORT", "8080"))
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
