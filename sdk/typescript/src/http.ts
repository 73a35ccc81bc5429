// The transport: authenticated fetch calls with a timeout and an
// AbortSignal on each, retries where they are safe, error bodies turned
// into typed errors, and NDJSON streams read line by line.

import { AirlockError, ConnectionError, ResponseTooLargeError, TimeoutError, errorFromBody } from "./errors.js";

/** Options every call takes. */
export interface CallOptions {
  /** Aborts the call; the call then rejects with the signal's reason. */
  signal?: AbortSignal;
  /**
   * Bounds the whole call, the transfer of the response included, in
   * milliseconds; past it the call rejects with a TimeoutError. Without
   * it, a call that returns a result is bounded by the client's
   * timeoutMs (longer for calls the server may hold longer: an exec, a
   * cell, a run), and a stream, an upload or a download by the client's
   * timeoutMs until the response starts, then only by signal.
   */
  timeoutMs?: number;
}

/** How long an error body the client reads may be. */
const maxErrorBytes = 64 << 10;
/** How many times a safe request is tried in all. */
const maxAttempts = 3;
/** The longest Retry-After the client waits for before retrying. */
const maxRetryWaitMs = 10_000;

/** What a query string may hold: lists repeat the key. */
export type Query = Record<string, string | number | boolean | string[] | undefined>;

/** One request. */
export interface Req {
  method: "GET" | "POST" | "PUT" | "DELETE" | "PATCH";
  path: string;
  query?: Query;
  /** A JSON body (any value but undefined). */
  json?: unknown;
  /** A raw body, streamed when it is a ReadableStream. */
  body?: BodyInit;
  headers?: Record<string, string>;
  /** The statuses that are success; the first is usual (default 200). */
  expect?: number[];
  /** The call's options. */
  call?: CallOptions;
  /**
   * stream: the timeout bounds only the wait for the response unless
   * call.timeoutMs is set (a stream, upload or download).
   */
  stream?: boolean;
  /** The timeout when call.timeoutMs is not set (default: the client's). */
  defaultTimeoutMs?: number;
}

/** An open response with the means to end the call. */
export interface Open {
  res: Response;
  /** Aborted when the call ends early: a timeout, the caller's signal. */
  signal: AbortSignal;
  /** Maps an error raised while the body is read (abort, timeout). */
  fail(err: unknown): unknown;
  /** Ends the call: clears its timer and aborts a body not read yet. */
  close(): void;
}

/** A fetch-based transport for one server and one API key. */
export class Transport {
  readonly base: URL;
  readonly #key: string;
  readonly timeoutMs: number;
  readonly #userAgent: string;

  constructor(base: URL, key: string, timeoutMs: number, userAgent: string) {
    this.base = base;
    this.#key = key;
    this.timeoutMs = timeoutMs;
    this.#userAgent = userAgent;
  }

  /** The URL of path with query q. */
  url(path: string, q?: Query): URL {
    const u = new URL(this.base.href.replace(/\/+$/, "") + path);
    for (const [k, v] of Object.entries(q ?? {})) {
      if (v === undefined) continue;
      if (Array.isArray(v)) {
        for (const x of v) u.searchParams.append(k, x);
      } else {
        u.searchParams.set(k, String(v));
      }
    }
    return u;
  }

  /**
   * Sends r and returns its response once its status is expected; any
   * other status becomes a typed error. GETs are retried on a failed
   * connection and on 503 with Retry-After, within the call's timeout.
   */
  async open(r: Req): Promise<Open> {
    const ctl = new AbortController();
    const call = r.call ?? {};
    const timeoutMs = call.timeoutMs ?? r.defaultTimeoutMs ?? this.timeoutMs;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const onAbort = () => ctl.abort(call.signal?.reason);
    if (call.signal) {
      if (call.signal.aborted) throw call.signal.reason;
      call.signal.addEventListener("abort", onAbort, { once: true });
    }
    if (timeoutMs > 0 && Number.isFinite(timeoutMs)) {
      timer = setTimeout(() => {
        ctl.abort(new TimeoutError(`airlock: ${r.method} ${r.path}: no answer within ${timeoutMs} ms`, "timeout", 0));
      }, timeoutMs);
    }
    const close = () => {
      if (timer !== undefined) clearTimeout(timer);
      timer = undefined;
      call.signal?.removeEventListener("abort", onAbort);
      if (!ctl.signal.aborted) ctl.abort(new AirlockError("airlock: the call ended", "canceled", 0));
    };
    const fail = (err: unknown): unknown => (ctl.signal.aborted && !(err instanceof AirlockError) ? ctl.signal.reason : err);
    try {
      const res = await this.#send(r, ctl.signal);
      if (r.stream && call.timeoutMs === undefined && timer !== undefined) {
        clearTimeout(timer);
        timer = undefined;
      }
      return { res, signal: ctl.signal, fail, close };
    } catch (err) {
      close();
      throw fail(err);
    }
  }

  async #send(r: Req, signal: AbortSignal): Promise<Response> {
    const headers: Record<string, string> = {
      Authorization: `Bearer ${this.#key}`,
      "User-Agent": this.#userAgent,
      ...r.headers,
    };
    let body = r.body;
    if (r.json !== undefined) {
      body = JSON.stringify(r.json);
      headers["Content-Type"] = "application/json";
    }
    const init: RequestInit & { duplex?: "half" } = { method: r.method, headers, body, signal };
    if (body instanceof ReadableStream) {
      init.duplex = "half"; // streamed as it is read, never buffered whole
    }
    const u = this.url(r.path, r.query);
    const expect = r.expect ?? [200];
    const safe = r.method === "GET";
    // Node's fetch (undici 6) keeps the chunks of a streamed request body
    // until the request ends (a 100 MB upload held ~92 MB), so on Node a
    // stream goes through node:http, which waits for the socket to drain.
    const viaNode = body instanceof ReadableStream && isNode();
    for (let attempt = 1; ; attempt++) {
      let res: Response;
      try {
        res = viaNode ? await sendNode(u, r.method, headers, body as ReadableStream<Uint8Array>, signal) : await fetch(u, init);
      } catch (err) {
        if (signal.aborted) throw signal.reason;
        if (err instanceof AirlockError) throw err;
        const e = new ConnectionError(`airlock: ${r.method} ${r.path}: ${describe(err)}`, "unavailable", 0, { cause: err });
        if (safe && attempt < maxAttempts) {
          await sleep(backoff(attempt), signal);
          continue;
        }
        throw e;
      }
      if (expect.includes(res.status)) return res;
      const retryAfter = retryAfterMs(res.headers.get("Retry-After"));
      const text = await readCapped(res, maxErrorBytes).catch(() => "");
      const e = errorFromBody(res.status, res.statusText, text, retryAfter);
      if (safe && res.status === 503 && retryAfter !== undefined && attempt < maxAttempts) {
        await sleep(Math.min(retryAfter, maxRetryWaitMs), signal);
        continue;
      }
      throw e;
    }
  }

  /** Sends r and decodes its JSON answer (up to maxBytes). */
  async json<T>(r: Req, maxBytes = 16 << 20): Promise<T> {
    const o = await this.open(r);
    try {
      const text = await readCapped(o.res, maxBytes, true);
      return (text === "" ? undefined : JSON.parse(text)) as T;
    } catch (err) {
      throw o.fail(err);
    } finally {
      o.close();
    }
  }

  /** Sends r and discards its answer (a 204). */
  async none(r: Req): Promise<void> {
    await this.json<unknown>({ ...r, expect: r.expect ?? [204] });
  }

  /**
   * Sends r (asking for NDJSON) and yields each line of its answer parsed
   * as JSON, each at most maxLine bytes. Ending the iteration early ends
   * the request.
   */
  async *ndjson<T>(r: Req, maxLine: number): AsyncGenerator<T, void, undefined> {
    const o = await this.open({ ...r, stream: true, headers: { Accept: "application/x-ndjson", ...r.headers } });
    try {
      for await (const line of lines(o.res, maxLine)) {
        yield JSON.parse(line) as T;
      }
    } catch (err) {
      throw o.fail(err);
    } finally {
      o.close();
    }
  }
}

/** Whether this is Node.js, whose node:http the SDK may use. */
function isNode(): boolean {
  const p = (globalThis as { process?: { versions?: { node?: string } } }).process;
  return typeof p?.versions?.node === "string";
}

/** The part of node:http's request that sendNode uses (no @types/node here). */
interface NodeRequest {
  write(chunk: Uint8Array): boolean;
  end(): void;
  destroy(err?: unknown): void;
  once(ev: "drain" | "close", fn: () => void): void;
  removeListener(ev: "drain" | "close", fn: () => void): void;
  on(ev: "error", fn: (err: unknown) => void): void;
  on(ev: "response", fn: (res: NodeResponse) => void): void;
}

interface NodeResponse {
  statusCode?: number;
  statusMessage?: string;
  headers: Record<string, string | string[] | undefined>;
  on(ev: "data", fn: (chunk: Uint8Array) => void): void;
  on(ev: "end", fn: () => void): void;
  on(ev: "error", fn: (err: unknown) => void): void;
}

/**
 * Sends body, a stream, with node:http(s), writing each chunk only once
 * the socket took the last (backpressure), and returns the answer, which
 * is small (a JSON document), as a Response.
 */
async function sendNode(u: URL, method: string, headers: Record<string, string>, body: ReadableStream<Uint8Array>, signal: AbortSignal): Promise<Response> {
  const spec = u.protocol === "https:" ? "node:https" : "node:http";
  const mod = (await import(spec)) as { request(u: URL, o: { method: string; headers: Record<string, string> }): NodeRequest };
  const reader = body.getReader();
  return new Promise<Response>((resolve, reject) => {
    const req = mod.request(u, { method, headers });
    let settled = false;
    const onAbort = () => fail(signal.reason);
    function fail(err: unknown) {
      if (settled) return;
      settled = true;
      signal.removeEventListener("abort", onAbort);
      req.destroy();
      reader.cancel(err).catch(() => {});
      reject(err);
    }
    if (signal.aborted) return fail(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    req.on("error", (err) => fail(signal.aborted ? signal.reason : err));
    req.on("response", (res) => {
      const parts: Uint8Array[] = [];
      let n = 0;
      res.on("data", (c) => {
        if (n + c.byteLength <= maxErrorBytes * 16) parts.push(c);
        n += c.byteLength;
      });
      res.on("error", (err) => fail(err));
      res.on("end", () => {
        if (settled) return;
        settled = true;
        signal.removeEventListener("abort", onAbort);
        reader.cancel().catch(() => {}); // an early answer (an error) ends the upload
        const h = new Headers();
        for (const [k, v] of Object.entries(res.headers)) {
          if (v !== undefined) h.set(k, Array.isArray(v) ? v.join(", ") : v);
        }
        const status = res.statusCode ?? 502;
        const data = [204, 205, 304].includes(status) ? null : concat(parts, parts.reduce((a, p) => a + p.byteLength, 0));
        resolve(new Response(data as BodyInit | null, { status, statusText: res.statusMessage ?? "", headers: h }));
      });
    });
    void (async () => {
      try {
        for (;;) {
          const { value, done } = await reader.read();
          if (done || settled) break;
          if (!req.write(value)) {
            await new Promise<void>((r) => {
              const done = () => {
                req.removeListener("drain", done);
                req.removeListener("close", done);
                r();
              };
              req.once("drain", done);
              req.once("close", done);
            });
          }
        }
        if (!settled) req.end();
      } catch (err) {
        fail(new AirlockError(`airlock: reading the upload failed: ${(err as Error)?.message ?? err}`, "canceled", 0, { cause: err }));
      }
    })();
  });
}

/** The lines of res's body, each without its newline, at most maxLine bytes. */
async function* lines(res: Response, maxLine: number): AsyncGenerator<string> {
  if (!res.body) return;
  const dec = new TextDecoder();
  let buf = "";
  const reader = res.body.getReader();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let nl: number;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (line.trim() !== "") yield line;
      }
      if (buf.length > maxLine) {
        throw new ResponseTooLargeError(`airlock: a stream line is longer than ${maxLine} bytes`, "response_too_large", 0);
      }
    }
    buf += dec.decode();
    if (buf.trim() !== "") yield buf;
  } finally {
    reader.releaseLock();
    await res.body.cancel().catch(() => {});
  }
}

/** Reads res's body as text, refusing more than max bytes. */
export async function readCapped(res: Response, max: number, strict = false): Promise<string> {
  if (!res.body) return "";
  const reader = res.body.getReader();
  const parts: Uint8Array[] = [];
  let n = 0;
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      n += value.byteLength;
      if (n > max) {
        if (strict) {
          throw new ResponseTooLargeError(`airlock: the response is larger than ${max} bytes`, "response_too_large", 0);
        }
        parts.push(value.subarray(0, value.byteLength - (n - max)));
        break;
      }
      parts.push(value);
    }
  } finally {
    reader.releaseLock();
    await res.body.cancel().catch(() => {});
  }
  return new TextDecoder().decode(concat(parts, Math.min(n, max)));
}

/** Joins parts of total length n. */
export function concat(parts: Uint8Array[], n: number): Uint8Array {
  const out = new Uint8Array(n);
  let off = 0;
  for (const p of parts) {
    out.set(p, off);
    off += p.byteLength;
  }
  return out;
}

/** The Retry-After header in milliseconds (seconds or an HTTP date). */
function retryAfterMs(h: string | null): number | undefined {
  if (h === null || h.trim() === "") return undefined;
  const s = Number(h);
  if (Number.isFinite(s) && s >= 0) return s * 1000;
  const t = Date.parse(h);
  return Number.isNaN(t) ? undefined : Math.max(0, t - Date.now());
}

/** The wait before retry attempt+1: 200 ms, 400 ms, ... */
function backoff(attempt: number): number {
  return Math.min(200 * 2 ** (attempt - 1), 2000);
}

/** Waits ms, or rejects with signal's reason once it aborts. */
function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal.reason);
    };
    signal.addEventListener("abort", onAbort, { once: true });
  });
}

/** A network error's cause in words (fetch wraps it as "fetch failed"). */
function describe(err: unknown): string {
  const e = err as { message?: string; cause?: { code?: string; message?: string } };
  const cause = e?.cause?.code ?? e?.cause?.message;
  return cause ? `${e.message ?? "fetch failed"} (${cause})` : String(e?.message ?? err);
}
