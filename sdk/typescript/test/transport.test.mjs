// The transport against a scripted HTTP server on loopback (no daemon):
// the error body mapped to typed errors, retries only where they are
// safe, timeouts and aborts, and a streamed upload that is not buffered.

import assert from "node:assert/strict";
import { createServer } from "node:http";
import { after, before, test } from "node:test";

import {
  Airlock,
  AirlockError,
  ConnectionError,
  FailedPreconditionError,
  InternalError,
  NotFoundError,
  RateLimitedError,
  ResourceExhaustedError,
  TimeoutError,
  UnavailableError,
} from "../dist/index.js";

let server;
let base;
/** The handler of the next requests, and every request seen. */
let handle = (_req, res) => res.end();
const seen = [];

before(async () => {
  server = createServer((req, res) => {
    seen.push({ method: req.method, url: req.url, auth: req.headers.authorization, te: req.headers["transfer-encoding"] });
    handle(req, res);
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  base = `http://127.0.0.1:${server.address().port}`;
});

after(() => new Promise((r) => server.close(r)));

function reply(status, body, headers = {}) {
  return (_req, res) => {
    res.writeHead(status, { "Content-Type": "application/json", ...headers });
    res.end(typeof body === "string" ? body : JSON.stringify(body));
  };
}

const client = (opts = {}) => new Airlock({ url: base, apiKey: "k-test", ...opts });

test("the API's error codes become their classes", async () => {
  for (const [status, code, cls] of [
    [404, "not_found", NotFoundError],
    [409, "failed_precondition", FailedPreconditionError],
    [429, "rate_limited", RateLimitedError],
    [429, "resource_exhausted", ResourceExhaustedError],
    [500, "internal", InternalError],
  ]) {
    handle = reply(status, { error: { code, message: `m-${code}` } }, { "Retry-After": "2" });
    const err = await client().sandboxes.get("sb-x").catch((e) => e);
    assert.ok(err instanceof cls, `${code}: ${err}`);
    assert.equal(err.code, code);
    assert.equal(err.status, status);
    assert.equal(err.message, `m-${code}`);
  }
  handle = reply(429, { error: { code: "rate_limited", message: "slow down" } }, { "Retry-After": "2" });
  const rl = await client().sandboxes.create().catch((e) => e);
  assert.ok(rl instanceof RateLimitedError);
  assert.equal(rl.retryAfterMs, 2000);
  // A body that is not the API's keeps the status's class.
  handle = reply(502, "<html>bad gateway</html>");
  const e = await client().whoami().catch((x) => x);
  assert.equal(e.code, "bad_gateway");
  assert.ok(e instanceof AirlockError);
  assert.equal(seen.at(-1).auth, "Bearer k-test");
});

test("a GET is retried on 503 with Retry-After; a POST is not", async () => {
  let n = 0;
  handle = (req, res) => {
    n++;
    if (n < 3) return reply(503, { error: { code: "unavailable", message: "adopting" } }, { "Retry-After": "0" })(req, res);
    reply(200, { tenant_id: "t", key_id: "k", scopes: ["admin"] })(req, res);
  };
  const me = await client().whoami();
  assert.equal(me.keyId, "k");
  assert.equal(n, 3);

  n = 0;
  handle = (req, res) => {
    n++;
    reply(503, { error: { code: "unavailable", message: "adopting" } }, { "Retry-After": "0" })(req, res);
  };
  await assert.rejects(client().exec("sb-x", { command: "true" }), UnavailableError);
  assert.equal(n, 1, "a POST is sent once");
  // Without Retry-After a 503 is not retried.
  n = 0;
  handle = (req, res) => {
    n++;
    reply(503, { error: { code: "unavailable", message: "x" } })(req, res);
  };
  await assert.rejects(client().whoami(), UnavailableError);
  assert.equal(n, 1);
});

test("a failed connection is retried for a GET only, then is ConnectionError", async () => {
  const dead = new Airlock({ url: "http://127.0.0.1:1", apiKey: "k" });
  const t0 = Date.now();
  const err = await dead.whoami().catch((e) => e);
  assert.ok(err instanceof ConnectionError, String(err));
  assert.ok(err instanceof UnavailableError);
  assert.equal(err.status, 0);
  assert.ok(Date.now() - t0 >= 500, "two backoffs (200 + 400 ms) before giving up");
});

test("timeoutMs and the client's timeout bound a call; a stream's only until it starts", async () => {
  handle = () => {}; // never answers
  const err = await client({ timeoutMs: 200 }).whoami().catch((e) => e);
  assert.ok(err instanceof TimeoutError && err.clientSide, String(err));
  const err2 = await client().sandboxes.get("sb-x", { timeoutMs: 150 }).catch((e) => e);
  assert.ok(err2 instanceof TimeoutError, String(err2));

  // A stream that started outlives the client's default timeout.
  handle = (_req, res) => {
    res.writeHead(200, { "Content-Type": "application/x-ndjson" });
    res.write('{"type":"start","pid":7}\n');
    setTimeout(() => res.write('{"type":"stdout","data":"late"}\n'), 400);
    setTimeout(() => res.end('{"type":"exit","status":"success","exit_code":0}\n'), 500);
  };
  const evs = [];
  for await (const ev of client({ timeoutMs: 200 }).execStream("sb-x", { command: "x" })) evs.push(ev);
  assert.deepEqual(
    evs.map((e) => e.type),
    ["start", "stdout", "exit"],
  );
  assert.equal(evs[1].text, "late");
  // A stream's error line is a typed error.
  handle = (_req, res) => {
    res.writeHead(200, { "Content-Type": "application/x-ndjson" });
    res.end('{"type":"start","pid":7}\n{"type":"error","error":{"code":"unavailable","message":"the sandbox died"}}\n');
  };
  await assert.rejects(
    (async () => {
      for await (const _ of client().execStream("sb-x", { command: "x" }));
    })(),
    (e) => e instanceof UnavailableError && e.message === "the sandbox died",
  );
  // A stream cut before its exit line is an error, not a short success.
  handle = (_req, res) => {
    res.writeHead(200, { "Content-Type": "application/x-ndjson" });
    res.end('{"type":"start","pid":7}\n');
  };
  await assert.rejects(
    (async () => {
      for await (const _ of client().execStream("sb-x", { command: "x" }));
    })(),
    /ended without a result/,
  );
});

test("an upload from a stream is sent chunked, as it is produced", async () => {
  let got = 0;
  let firstByteAt;
  handle = (req, res) => {
    req.on("data", (c) => {
      firstByteAt ??= Date.now();
      got += c.length;
    });
    req.on("end", () =>
      reply(200, { name: "f", path: "/home/user/f", type: "file", size: got, mode: 420, uid: 1000, gid: 1000, mod_time: new Date().toISOString(), sha256: "00" })(req, res),
    );
  };
  let producedLastAt;
  const body = new ReadableStream({
    async pull(c) {
      if (this.n === undefined) this.n = 0;
      if (this.n++ === 5) {
        producedLastAt = Date.now();
        return c.close();
      }
      await new Promise((r) => setTimeout(r, 50));
      c.enqueue(new Uint8Array(1000));
    },
  });
  const info = await client().files.write("sb-x", "f", body);
  assert.equal(info.size, 5000);
  assert.equal(seen.at(-1).te, "chunked");
  assert.equal(seen.at(-1).method, "PUT");
  assert.ok(firstByteAt < producedLastAt, "the server had bytes before the stream ended");
});

test("IDs that cannot be a path segment are refused before sending", async () => {
  const before = seen.length;
  await assert.rejects(client().sandboxes.get("../keys"), { code: "invalid_argument" });
  await assert.rejects(client().processes.signal("sb-x", 0, "TERM"), { code: "invalid_argument" });
  await assert.rejects(client().approvals.get("nope"), { code: "invalid_argument" });
  assert.equal(seen.length, before);
  assert.throws(() => new Airlock({ url: base, apiKey: "" }), { code: "invalid_argument" });
  assert.throws(() => new Airlock({ url: "ftp://x", apiKey: "k" }), { code: "invalid_argument" });
});
