// The Airlock client: one server, one API key, the API's resources as
// namespaces (sandboxes, processes, files, code, templates, tools,
// toolsets, approvals, keys) and exec, run and whoami on the client.

import { AirlockError, invalid } from "./errors.js";
import { type CallOptions, type Query, Transport, concat } from "./http.js";
import type {
  Approval,
  CodeContext,
  CodeError,
  CodeEvent,
  CodeExecution,
  CodeResult,
  CreateSandboxRequest,
  CreatedKey,
  ExecEvent,
  ExecRequest,
  ExecResult,
  FileInfo,
  Key,
  ProcessList,
  RunCodeRequest,
  RunRequest,
  RunResult,
  Sandbox,
  SandboxState,
  SandboxStats,
  TemplateDetail,
  TemplateList,
  Tool,
  ToolFunction,
  ToolRequest,
  ToolCallTrace,
  Toolset,
  WatchEvent,
  WhoAmI,
} from "./types.js";
import {
  type Wire,
  approvalFrom,
  bytesOf,
  codeContextFrom,
  codeExecutionFrom,
  codeResultFrom,
  createdKeyFrom,
  execResultFrom,
  fileInfoFrom,
  keyFrom,
  lineData,
  limitsToWire,
  networkToWire,
  processListFrom,
  putData,
  sandboxFrom,
  sandboxStatsFrom,
  streamError,
  toolCallTraceFrom,
  toolRequestFrom,
  whoAmIFrom,
} from "./wire.js";

/** How a client is made; unset fields come from the environment. */
export interface AirlockOptions {
  /** The server's base URL; default AIRLOCK_URL, else http://127.0.0.1:7070. */
  url?: string;
  /** The API key; default AIRLOCK_API_KEY. */
  apiKey?: string;
  /**
   * The default timeout of a call in milliseconds (default 60 000): see
   * CallOptions.timeoutMs for what it bounds.
   */
  timeoutMs?: number;
  /** The User-Agent header. */
  userAgent?: string;
}

/** One line of an exec stream: 1 MiB (the server sends at most 32 KiB of output a line). */
const maxStreamLine = 1 << 20;
/** One line of a cell's stream: an image of up to 5 MiB in base64, texts up to 1 MiB. */
const maxCodeLine = 32 << 20;
/** One line of a watch. */
const maxWatchLine = 64 << 10;
/** One line of a stats stream: a sample is about 500 bytes. */
const maxStatsLine = 64 << 10;
/** The bounds of a stats interval in milliseconds; the server's default is 1000. */
const minStatsIntervalMs = 100;
const maxStatsIntervalMs = 60_000;
const defaultStatsIntervalMs = 1000;
/** What a streamed run collects of each output stream. */
const maxRunCollect = 16 << 20;
/** What the server may take beyond a command's own timeout to answer. */
const answerMarginMs = 30_000;

/** A process environment, where there is one (Node); read without @types/node. */
function envVar(name: string): string | undefined {
  const p = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process;
  const v = p?.env?.[name];
  return v === "" ? undefined : v;
}

/** Refuses an ID that cannot be one path segment. */
function seg(what: string, id: string): string {
  if (typeof id !== "string" || id === "" || id === "." || id === ".." || /[/?#]/.test(id)) {
    throw invalid(`${what} ${JSON.stringify(id)} is not valid`);
  }
  return encodeURIComponent(id);
}

function sbPath(id: string, suffix = ""): string {
  return `/v1/sandboxes/${seg("sandbox id", id)}${suffix}`;
}

/** The query of a stats request, its interval checked. */
function statsQuery(intervalMs: number | undefined, stream: boolean): Query {
  if (intervalMs !== undefined && !(Number.isInteger(intervalMs) && intervalMs >= minStatsIntervalMs && intervalMs <= maxStatsIntervalMs)) {
    throw invalid(`stats interval ${intervalMs} ms: want whole milliseconds from ${minStatsIntervalMs} to ${maxStatsIntervalMs}`);
  }
  return { interval_ms: intervalMs, stream: stream ? "1" : undefined };
}

function pidSeg(pid: number): string {
  if (!Number.isInteger(pid) || pid < 1) throw invalid(`pid ${pid} is not a process id`);
  return String(pid);
}

function checkPath(path: string): string {
  if (typeof path !== "string" || path === "") throw invalid("the file path is empty");
  return path;
}

/** Options of a file request. */
export interface FileOptions extends CallOptions {
  /** Acts as this user ("user" or "root"); default the sandbox's default user. */
  user?: string;
}

/** What files.write takes: the whole content, or a stream of it that is sent as it is read. */
export type FileData =
  | string
  | Uint8Array
  | ArrayBuffer
  | Blob
  | ReadableStream<Uint8Array>
  | AsyncIterable<Uint8Array | string>;

/** data as a fetch body: a stream is passed on, never buffered whole. */
function bodyOf(data: FileData): BodyInit {
  if (typeof data === "string" || data instanceof Uint8Array || data instanceof ArrayBuffer || data instanceof Blob) {
    return data as BodyInit;
  }
  if (data instanceof ReadableStream) return data;
  if (data && typeof (data as AsyncIterable<unknown>)[Symbol.asyncIterator] === "function") {
    const it = (data as AsyncIterable<Uint8Array | string>)[Symbol.asyncIterator]();
    const enc = new TextEncoder();
    return new ReadableStream<Uint8Array>(
      {
        async pull(c) {
          const { value, done } = await it.next();
          if (done) {
            c.close();
          } else {
            c.enqueue(typeof value === "string" ? enc.encode(value) : new Uint8Array(value.buffer, value.byteOffset, value.byteLength));
          }
        },
        async cancel(reason) {
          await it.return?.(reason);
        },
      },
      { highWaterMark: 0 },
    );
  }
  throw invalid("file data must be a string, Uint8Array, ArrayBuffer, Blob, ReadableStream or async iterable");
}

/** Options of a streamed or buffered run. */
export interface RunOptions extends CallOptions {
  /**
   * Caller-executed tools by name: each tool_request line of the run is
   * answered with the function's result (or its error). Setting it, or
   * a callback, streams the run.
   */
  tools?: Record<string, ToolFunction>;
  /** Caps the tool functions running at once (default 64). */
  maxToolCalls?: number;
  /** Gets the output as it comes (the result then holds none). */
  onOutput?: (stream: "stdout" | "stderr", data: Uint8Array) => void;
  /** Gets each tool call as it ends. */
  onToolCall?: (call: ToolCallTrace) => void;
}

/** The transport of a client, for the SDK's own modules (not exported from the package). */
export let transportOf: (a: Airlock) => Transport;

/**
 * A client of one Airlock server with one API key. Every method takes
 * CallOptions (an AbortSignal and a timeout) as its last argument, and
 * rejects with an AirlockError subclass for the API's error codes.
 *
 * ```ts
 * const airlock = new Airlock(); // AIRLOCK_URL, AIRLOCK_API_KEY
 * const sb = await airlock.sandboxes.create();
 * const res = await airlock.exec(sb.id, { command: "echo hi" });
 * await airlock.sandboxes.delete(sb.id);
 * ```
 */
export class Airlock {
  readonly #t: Transport;
  static {
    transportOf = (a) => a.#t;
  }

  constructor(opts: AirlockOptions = {}) {
    const url = opts.url ?? envVar("AIRLOCK_URL") ?? "http://127.0.0.1:7070";
    const key = opts.apiKey ?? envVar("AIRLOCK_API_KEY");
    let base: URL;
    try {
      base = new URL(url);
    } catch {
      throw invalid(`base URL ${JSON.stringify(url)} must be http(s)://host[:port]`);
    }
    if ((base.protocol !== "http:" && base.protocol !== "https:") || base.search !== "" || base.hash !== "") {
      throw invalid(`base URL ${JSON.stringify(url)} must be http(s)://host[:port] without a query`);
    }
    if (!key || /\s/.test(key)) {
      throw invalid("the API key is missing (set apiKey or AIRLOCK_API_KEY) or contains white space");
    }
    const timeoutMs = opts.timeoutMs ?? 60_000;
    if (!(timeoutMs > 0)) throw invalid(`timeoutMs ${timeoutMs} must be positive`);
    this.#t = new Transport(base, key, timeoutMs, opts.userAgent ?? "airlock-typescript-sdk/0.1");
  }

  /** The server's base URL. */
  get url(): string {
    return this.#t.base.href;
  }

  /** The calling key: its tenant, ID and scopes. Any valid key may ask. */
  async whoami(opts?: CallOptions): Promise<WhoAmI> {
    return whoAmIFrom(await this.#t.json<Wire>({ method: "GET", path: "/v1/whoami", call: opts }));
  }

  /** Sandboxes: create, get, list, delete, setTimeout, stats, streamStats. */
  readonly sandboxes = {
    /** Creates a sandbox and returns it once it runs (scope sandboxes:write). */
    create: async (req: CreateSandboxRequest = {}, opts?: CallOptions): Promise<Sandbox> => {
      const body = {
        template: req.template,
        timeout_s: req.timeoutS,
        idle_timeout_s: req.idleTimeoutS,
        limits: limitsToWire(req.limits),
        network: networkToWire(req.network),
        env: req.env,
        metadata: req.metadata,
        tools: req.tools,
        toolsets: req.toolsets,
        command_policy: req.commandPolicy,
      };
      const w = await this.#t.json<Wire>({ method: "POST", path: "/v1/sandboxes", json: body, expect: [201], call: opts, defaultTimeoutMs: Math.max(this.#t.timeoutMs, 120_000) });
      return sandboxFrom(w);
    },
    /** Returns a sandbox; NotFoundError when there is none (for this tenant). */
    get: async (id: string, opts?: CallOptions): Promise<Sandbox> => {
      return sandboxFrom(await this.#t.json<Wire>({ method: "GET", path: sbPath(id), call: opts }));
    },
    /** Lists the caller's sandboxes, oldest first, filtered by state and metadata. */
    list: async (filter: { states?: SandboxState[]; metadata?: Record<string, string> } = {}, opts?: CallOptions): Promise<Sandbox[]> => {
      const query: Record<string, string | string[]> = {};
      if (filter.states?.length) query.state = filter.states;
      for (const [k, v] of Object.entries(filter.metadata ?? {})) query[`metadata.${k}`] = v;
      const w = await this.#t.json<Wire>({ method: "GET", path: "/v1/sandboxes", query, call: opts });
      return (w.sandboxes ?? []).map(sandboxFrom);
    },
    /** Destroys a sandbox; deleting a stopped one succeeds. */
    delete: async (id: string, opts?: CallOptions): Promise<void> => {
      await this.#t.none({ method: "DELETE", path: sbPath(id), call: opts, defaultTimeoutMs: Math.max(this.#t.timeoutMs, 120_000) });
    },
    /** Makes a sandbox expire timeoutS seconds from now. */
    setTimeout: async (id: string, timeoutS: number, opts?: CallOptions): Promise<Sandbox> => {
      const w = await this.#t.json<Wire>({ method: "POST", path: sbPath(id, "/timeout"), json: { timeout_s: timeoutS }, call: opts });
      return sandboxFrom(w);
    },
    /**
     * One sample of a sandbox's resource use and caps, its CPU rate
     * measured over intervalMs (100 to 60 000; default the server's
     * 1000): the call takes that long. A sandbox that is not running is
     * FailedPreconditionError. Reading stats does not keep an idle
     * sandbox alive.
     */
    stats: async (id: string, opts: CallOptions & { intervalMs?: number } = {}): Promise<SandboxStats> => {
      const query = statsQuery(opts.intervalMs, false);
      const defaultTimeoutMs = Math.max(this.#t.timeoutMs, (opts.intervalMs ?? defaultStatsIntervalMs) + answerMarginMs);
      return sandboxStatsFrom(await this.#t.json<Wire>({ method: "GET", path: sbPath(id, "/stats"), query, call: opts, defaultTimeoutMs }));
    },
    /**
     * Yields a sample of a sandbox's resource use every intervalMs (100
     * to 60 000; default the server's 1000) until the loop is left, the
     * signal aborts or the sandbox ends (the iteration then simply
     * ends). A stream counts against the server's caps on requests in
     * flight per sandbox and per key.
     */
    streamStats: (id: string, opts: CallOptions & { intervalMs?: number } = {}): AsyncGenerator<SandboxStats, void, undefined> => {
      const t = this.#t;
      return (async function* (): AsyncGenerator<SandboxStats, void, undefined> {
        const query = statsQuery(opts.intervalMs, true);
        for await (const l of t.ndjson<Wire>({ method: "GET", path: sbPath(id, "/stats"), query, call: opts }, maxStatsLine)) {
          yield sandboxStatsFrom(l);
        }
      })();
    },
  };

  /** The body of an exec request. */
  #execBody(req: ExecRequest): Wire {
    if (!req || (req.cmd?.length ? 1 : 0) + (req.command ? 1 : 0) !== 1) {
      throw invalid("exec: exactly one of cmd and command must be set");
    }
    const body: Wire = {
      cmd: req.cmd,
      command: req.command,
      cwd: req.cwd,
      env: req.env,
      user: req.user,
      timeout_s: req.timeoutS,
      background: req.background,
      tag: req.tag,
      keep_stdin: req.keepStdin,
      pty: req.pty,
    };
    putData(body, "stdin", req.stdin);
    return body;
  }

  /**
   * Runs a command to completion and returns its result with its output
   * (the server keeps up to 1 MiB a stream). A command that ran and
   * failed, or that its timeout killed (status "timeout"), is a result,
   * not an error.
   */
  async exec(id: string, req: ExecRequest, opts?: CallOptions): Promise<ExecResult> {
    const body = this.#execBody(req);
    const w = await this.#t.json<Wire>({
      method: "POST",
      path: sbPath(id, "/exec"),
      json: body,
      call: opts,
      defaultTimeoutMs: Math.max(this.#t.timeoutMs, (req.timeoutS ?? 60) * 1000 + answerMarginMs),
    });
    return execResultFrom(w);
  }

  /**
   * Runs a command and yields its events as they come: start (with the
   * pid) first, then stdout and stderr chunks, then exit. Leaving the
   * loop early ends the request, which kills the command unless it runs
   * in the background.
   */
  async *execStream(id: string, req: ExecRequest, opts?: CallOptions): AsyncGenerator<ExecEvent, void, undefined> {
    const body = this.#execBody(req);
    yield* outputEvents(this.#t.ndjson<Wire>({ method: "POST", path: sbPath(id, "/exec"), json: body, call: opts }, maxStreamLine), "exec stream");
  }

  /** Processes: list, signal, follow, sendStdin, killAll, resize. */
  readonly processes = {
    /** Lists every process of a sandbox but its agent, by pid. */
    list: async (id: string, opts?: CallOptions): Promise<ProcessList> => {
      return processListFrom(await this.#t.json<Wire>({ method: "GET", path: sbPath(id, "/processes"), call: opts }));
    },
    /** Sends signal (a name like "TERM" or a number) to process pid. */
    signal: async (id: string, pid: number, signal: string | number, opts?: CallOptions): Promise<void> => {
      if (signal === "" || signal === undefined) throw invalid("a signal is required");
      await this.#t.none({ method: "POST", path: sbPath(id, `/processes/${pidSeg(pid)}/signal`), json: { signal }, call: opts });
    },
    /**
     * Follows a process the agent started (a background exec): yields its
     * output from now on, then its exit. Leaving the loop detaches; the
     * process keeps running.
     */
    follow: (id: string, pid: number, opts?: CallOptions): AsyncGenerator<ExecEvent, void, undefined> => {
      const path = sbPath(id, `/processes/${pidSeg(pid)}/output`);
      return outputEvents(this.#t.ndjson<Wire>({ method: "GET", path, call: opts }, maxStreamLine), "process output");
    },
    /** Writes data to the stdin of a process started with keepStdin; close closes it after. */
    sendStdin: async (id: string, pid: number, data: string | Uint8Array, opts: CallOptions & { close?: boolean } = {}): Promise<void> => {
      const body: Wire = { close: opts.close || undefined };
      if (bytesOf(data).byteLength > 0) putData(body, "data", data);
      await this.#t.none({ method: "POST", path: sbPath(id, `/processes/${pidSeg(pid)}/stdin`), json: body, call: opts });
    },
    /** Kills every process but the agent; returns how many once all are gone. */
    killAll: async (id: string, opts: CallOptions & { waitS?: number } = {}): Promise<number> => {
      const w = await this.#t.json<Wire>({ method: "POST", path: sbPath(id, "/processes/kill"), json: { timeout_s: opts.waitS }, call: opts, defaultTimeoutMs: Math.max(this.#t.timeoutMs, 90_000) });
      return w.killed ?? 0;
    },
    /** Resizes the terminal of a process started with pty. */
    resize: async (id: string, pid: number, size: { cols: number; rows: number }, opts?: CallOptions): Promise<void> => {
      await this.#t.none({ method: "POST", path: sbPath(id, `/processes/${pidSeg(pid)}/resize`), json: size, call: opts });
    },
  };

  /** Files: write, read (streamed), stat, list, mkdir, move, remove, watch. */
  readonly files = {
    /**
     * Writes data to path (relative paths are from the user's home),
     * creating parent directories; the file is replaced once all of it
     * arrived. A ReadableStream, a Node Readable or another async
     * iterable is streamed as it is read, never held whole. Returns the
     * file with the SHA-256 of what the server received.
     */
    write: async (id: string, path: string, data: FileData, opts: FileOptions = {}): Promise<FileInfo> => {
      const body = bodyOf(data);
      const o = await this.#t.open({
        method: "PUT",
        path: sbPath(id, "/files"),
        query: { path: checkPath(path), user: opts.user },
        body,
        headers: { "Content-Type": "application/octet-stream" },
        call: opts,
        // A stream is bounded by opts.timeoutMs only: its size is unknown.
        defaultTimeoutMs: body instanceof ReadableStream ? Infinity : undefined,
      });
      try {
        return fileInfoFrom(JSON.parse(new TextDecoder().decode(new Uint8Array(await o.res.arrayBuffer()))));
      } catch (err) {
        throw o.fail(err);
      } finally {
        o.close();
      }
    },
    /**
     * Opens the file at path for streaming. A transfer that breaks midway
     * errors the stream, so a short file is never taken for a whole one.
     * The timeout (when given) bounds the whole transfer.
     */
    read: async (id: string, path: string, opts: FileOptions = {}): Promise<ReadableStream<Uint8Array>> => {
      const o = await this.#t.open({ method: "GET", path: sbPath(id, "/files"), query: { path: checkPath(path), user: opts.user }, call: opts, stream: true });
      const body = o.res.body;
      if (!body) {
        o.close();
        return new ReadableStream({ start: (c) => c.close() });
      }
      const reader = body.getReader();
      return new ReadableStream<Uint8Array>(
        {
          async pull(c) {
            try {
              const { value, done } = await reader.read();
              if (done) {
                o.close();
                c.close();
              } else {
                c.enqueue(value);
              }
            } catch (err) {
              const e = o.fail(err);
              o.close();
              c.error(e);
            }
          },
          async cancel(reason) {
            o.close();
            await reader.cancel(reason).catch(() => {});
          },
        },
        { highWaterMark: 0 },
      );
    },
    /** Reads the whole file at path into memory (at most maxBytes, default 64 MiB). */
    readBytes: async (id: string, path: string, opts: FileOptions & { maxBytes?: number } = {}): Promise<Uint8Array> => {
      const max = opts.maxBytes ?? 64 << 20;
      const stream = await this.files.read(id, path, opts);
      const parts: Uint8Array[] = [];
      let n = 0;
      for await (const chunk of stream) {
        n += chunk.byteLength;
        if (n > max) {
          await stream.cancel();
          throw new AirlockError(`airlock: file ${path} is larger than ${max} bytes`, "response_too_large", 0);
        }
        parts.push(chunk);
      }
      return concat(parts, n);
    },
    /** Reads the whole file at path as UTF-8 text. */
    readText: async (id: string, path: string, opts: FileOptions & { maxBytes?: number } = {}): Promise<string> => {
      return new TextDecoder().decode(await this.files.readBytes(id, path, opts));
    },
    /** Describes the entry at path (a symlink itself); NotFoundError when there is none. */
    stat: async (id: string, path: string, opts: FileOptions = {}): Promise<FileInfo> => {
      return fileInfoFrom(await this.#t.json<Wire>({ method: "GET", path: sbPath(id, "/files/stat"), query: { path: checkPath(path), user: opts.user }, call: opts }));
    },
    /** Lists the directory at path ("" for home) to depth levels (1 by default). */
    list: async (id: string, path = "", opts: FileOptions & { depth?: number } = {}): Promise<{ entries: FileInfo[]; truncated: boolean }> => {
      const query = { path: path || undefined, user: opts.user, depth: opts.depth && opts.depth > 1 ? opts.depth : undefined };
      const w = await this.#t.json<Wire>({ method: "GET", path: sbPath(id, "/files/list"), query, call: opts });
      return { entries: (w.entries ?? []).map(fileInfoFrom), truncated: !!w.truncated };
    },
    /** Creates the directory at path with its parents (mkdir -p). */
    mkdir: async (id: string, path: string, opts: FileOptions = {}): Promise<FileInfo> => {
      return fileInfoFrom(await this.#t.json<Wire>({ method: "POST", path: sbPath(id, "/files/mkdir"), query: { path: checkPath(path), user: opts.user }, call: opts }));
    },
    /** Renames path to newPath (replacing a file there) and describes it. */
    move: async (id: string, path: string, newPath: string, opts: FileOptions = {}): Promise<FileInfo> => {
      const query = { path: checkPath(path), to: checkPath(newPath), user: opts.user };
      return fileInfoFrom(await this.#t.json<Wire>({ method: "POST", path: sbPath(id, "/files/move"), query, call: opts }));
    },
    /** Deletes the file, symlink or (with recursive) directory tree at path. */
    remove: async (id: string, path: string, opts: FileOptions & { recursive?: boolean } = {}): Promise<void> => {
      const query = { path: checkPath(path), user: opts.user, recursive: opts.recursive ? "true" : undefined };
      await this.#t.none({ method: "DELETE", path: sbPath(id, "/files"), query, call: opts });
    },
    /**
     * Watches the directory at path: yields {type: "start"} once the watch
     * is in place, then each change, until the loop is left, the signal
     * aborts or the server ends the watch.
     */
    watch: (id: string, path: string, opts: FileOptions & { recursive?: boolean } = {}): AsyncGenerator<WatchEvent, void, undefined> => {
      const query = { path: path || undefined, user: opts.user, recursive: opts.recursive ? "true" : undefined };
      const lines = this.#t.ndjson<Wire>({ method: "GET", path: sbPath(id, "/files/watch"), query, call: opts }, maxWatchLine);
      return (async function* () {
        for await (const l of lines) {
          if (l.type === "start") yield { type: "start" };
          else if (l.type === "event") yield { type: "event", path: l.path, op: l.op };
          else if (l.type === "error") throw streamError(l, "watch failed");
        }
      })();
    },
  };

  /** The body of a cell request. */
  #codeBody(req: RunCodeRequest): Wire {
    if (!req || (!req.language && !req.contextId)) throw invalid("run code: language or contextId is required");
    if (req.contextId) seg("context id", req.contextId);
    return { language: req.language, code: req.code ?? "", context_id: req.contextId, env: req.env, timeout_s: req.timeoutS };
  }

  /** Code interpreter: cells (buffered and streamed) and contexts. */
  readonly code = {
    /** Runs a cell and returns how it ran, with its results (images as bytes) and output. */
    run: async (id: string, req: RunCodeRequest, opts?: CallOptions): Promise<CodeExecution> => {
      const w = await this.#t.json<Wire>(
        {
          method: "POST",
          path: sbPath(id, "/code"),
          json: this.#codeBody(req),
          call: opts,
          defaultTimeoutMs: Math.max(this.#t.timeoutMs, (req.timeoutS ?? 300) * 1000 + answerMarginMs),
        },
        64 << 20,
      );
      const results: CodeResult[] = (w.results ?? []).map(codeResultFrom);
      return codeExecutionFrom(w, results, w.stdout ?? "", w.stderr ?? "", w.error ?? undefined);
    },
    /**
     * Runs a cell and yields its events as they come: output, results,
     * the cell's error, then end with the whole execution. Leaving the
     * loop early interrupts the cell.
     */
    runStream: (id: string, req: RunCodeRequest, opts?: CallOptions): AsyncGenerator<CodeEvent, void, undefined> => {
      const lines = this.#t.ndjson<Wire>({ method: "POST", path: sbPath(id, "/code"), json: this.#codeBody(req), call: opts }, maxCodeLine);
      return (async function* (): AsyncGenerator<CodeEvent, void, undefined> {
        const results: CodeResult[] = [];
        let stdout = "";
        let stderr = "";
        let cellError: CodeError | undefined;
        for await (const l of lines) {
          switch (l.type) {
            case "stdout":
            case "stderr":
              if (l.type === "stdout") stdout += l.data ?? "";
              else stderr += l.data ?? "";
              yield { type: l.type, data: l.data ?? "" };
              break;
            case "result": {
              const r = codeResultFrom(l);
              results.push(r);
              yield { type: "result", result: r };
              break;
            }
            case "error":
              if (l.error && typeof l.error === "object") throw streamError(l, "code stream failed");
              cellError = { name: l.name, value: l.value, traceback: l.traceback };
              yield { type: "error", error: cellError };
              break;
            case "end":
              yield { type: "end", execution: codeExecutionFrom(l, results, stdout, stderr, cellError) };
              return;
          }
        }
        throw new AirlockError("airlock: code stream ended without a result", "unavailable", 200);
      })();
    },
    /** Stateful contexts: create, list, delete, restart, interrupt. */
    contexts: {
      /** Starts a context and returns it once it serves (at most 8 per sandbox). */
      create: async (id: string, req: { language: string; cwd?: string; env?: Record<string, string> }, opts?: CallOptions): Promise<CodeContext> => {
        const w = await this.#t.json<Wire>({ method: "POST", path: sbPath(id, "/contexts"), json: req, expect: [201], call: opts });
        return codeContextFrom(w);
      },
      list: async (id: string, opts?: CallOptions): Promise<CodeContext[]> => {
        const w = await this.#t.json<Wire>({ method: "GET", path: sbPath(id, "/contexts"), call: opts });
        return (w.contexts ?? []).map(codeContextFrom);
      },
      delete: async (id: string, contextId: string, opts?: CallOptions): Promise<void> => {
        await this.#t.none({ method: "DELETE", path: sbPath(id, `/contexts/${seg("context id", contextId)}`), call: opts });
      },
      /** Replaces a context's process (its state is lost). */
      restart: async (id: string, contextId: string, opts?: CallOptions): Promise<CodeContext> => {
        const w = await this.#t.json<Wire>({ method: "POST", path: sbPath(id, `/contexts/${seg("context id", contextId)}/restart`), call: opts });
        return codeContextFrom(w);
      },
      /** Interrupts the running cell; reports whether one ran. */
      interrupt: async (id: string, contextId: string, opts?: CallOptions): Promise<boolean> => {
        const w = await this.#t.json<Wire>({ method: "POST", path: sbPath(id, `/contexts/${seg("context id", contextId)}/interrupt`), call: opts });
        return !!w.interrupted;
      },
    },
  };

  /** Templates the caller sees (scope templates:read), in the API's form. */
  readonly templates = {
    list: async (opts?: CallOptions): Promise<TemplateList> => {
      return this.#t.json<TemplateList>({ method: "GET", path: "/v1/templates", call: opts });
    },
    /** A template with its layers and configuration; shared picks the shared one of that name. */
    get: async (name: string, opts: CallOptions & { shared?: boolean } = {}): Promise<TemplateDetail> => {
      const query = { shared: opts.shared ? "true" : undefined };
      return this.#t.json<TemplateDetail>({ method: "GET", path: `/v1/templates/${seg("template name", name)}`, query, call: opts });
    },
  };

  /** The tenant's tools of the tool gateway, in the API's form. */
  readonly tools = {
    /**
     * Registers a tool (scope tools:write): the API's PutToolRequest, e.g.
     * {name, description, input_schema, upstream: {kind: "caller"}}.
     */
    create: async (req: { name: string; [field: string]: unknown }, opts?: CallOptions): Promise<Tool> => {
      seg("tool name", req?.name);
      return this.#t.json<Tool>({ method: "POST", path: "/v1/tools", json: req, expect: [201], call: opts });
    },
    delete: async (name: string, opts?: CallOptions): Promise<void> => {
      await this.#t.none({ method: "DELETE", path: `/v1/tools/${seg("tool name", name)}`, call: opts });
    },
    list: async (opts?: CallOptions): Promise<Tool[]> => {
      return (await this.#t.json<Wire>({ method: "GET", path: "/v1/tools", call: opts })).tools ?? [];
    },
    get: async (name: string, opts?: CallOptions): Promise<Tool> => {
      return this.#t.json<Tool>({ method: "GET", path: `/v1/tools/${seg("tool name", name)}`, call: opts });
    },
    /** Calls a tool as the calling key (scope tools:call) and returns its result. */
    call: async (name: string, args: unknown = {}, opts?: CallOptions): Promise<unknown> => {
      const w = await this.#t.json<Wire>({ method: "POST", path: `/v1/tools/${seg("tool name", name)}/call`, json: { args }, call: opts, defaultTimeoutMs: Math.max(this.#t.timeoutMs, 600_000) });
      return w.result;
    },
    /** The calls of a sandbox's caller-executed tools waiting for an answer. */
    requests: async (id: string, opts?: CallOptions): Promise<ToolRequest[]> => {
      const w = await this.#t.json<Wire>({ method: "GET", path: sbPath(id, "/tool-calls"), call: opts });
      return (w.calls ?? []).map(toolRequestFrom);
    },
    /** Answers a waiting call with its output (any JSON value) or an error message. */
    answer: async (id: string, callId: string, answer: { output?: unknown; error?: string }, opts?: CallOptions): Promise<void> => {
      if (!/^tc-[a-z2-7]{16}$/.test(callId)) throw invalid(`tool call ID ${JSON.stringify(callId)} is malformed`);
      const body: Wire = {};
      if (answer.error !== undefined) {
        body.error = (answer.error || "the tool failed").slice(0, 4096);
      } else {
        body.output = answer.output === undefined ? null : answer.output;
      }
      await this.#t.none({ method: "POST", path: sbPath(id, `/tool-calls/${callId}`), json: body, call: opts });
    },
  };

  /** The tenant's toolsets, in the API's form. */
  readonly toolsets = {
    /** Registers a toolset of registered tools (scope tools:write). */
    create: async (req: { name: string; tools: string[] }, opts?: CallOptions): Promise<Toolset> => {
      seg("toolset name", req?.name);
      return this.#t.json<Toolset>({ method: "POST", path: "/v1/toolsets", json: req, expect: [201], call: opts });
    },
    delete: async (name: string, opts?: CallOptions): Promise<void> => {
      await this.#t.none({ method: "DELETE", path: `/v1/toolsets/${seg("toolset name", name)}`, call: opts });
    },
    list: async (opts?: CallOptions): Promise<Toolset[]> => {
      return (await this.#t.json<Wire>({ method: "GET", path: "/v1/toolsets", call: opts })).toolsets ?? [];
    },
    get: async (name: string, opts?: CallOptions): Promise<Toolset> => {
      return this.#t.json<Toolset>({ method: "GET", path: `/v1/toolsets/${seg("toolset name", name)}`, call: opts });
    },
  };

  /** Approvals of tool calls (scope approvals). */
  readonly approvals = {
    /** Pending ones and those ended in the last hour, newest first; or those in state. */
    list: async (opts: CallOptions & { state?: string } = {}): Promise<Approval[]> => {
      const w = await this.#t.json<Wire>({ method: "GET", path: "/v1/approvals", query: { state: opts.state }, call: opts });
      return (w.approvals ?? []).map(approvalFrom);
    },
    get: async (approvalId: string, opts?: CallOptions): Promise<Approval> => {
      return approvalFrom(await this.#t.json<Wire>({ method: "GET", path: `/v1/approvals/${approvalSeg(approvalId)}`, call: opts }));
    },
    /** Approves or denies a pending approval, which releases its call. */
    decide: async (approvalId: string, decision: { approve: boolean; reason?: string }, opts?: CallOptions): Promise<Approval> => {
      const body = { decision: decision.approve ? "approve" : "deny", reason: decision.reason };
      return approvalFrom(await this.#t.json<Wire>({ method: "POST", path: `/v1/approvals/${approvalSeg(approvalId)}`, json: body, call: opts }));
    },
  };

  /** API keys of the caller's tenant (scope admin). */
  readonly keys = {
    /** Creates a key with scopes; its secret is shown only here. */
    create: async (req: { name: string; scopes: string[]; expiresInS?: number }, opts?: CallOptions): Promise<CreatedKey> => {
      const body = { name: req.name, scopes: req.scopes, expires_in_s: req.expiresInS };
      return createdKeyFrom(await this.#t.json<Wire>({ method: "POST", path: "/v1/keys", json: body, expect: [201], call: opts }));
    },
    list: async (opts?: CallOptions): Promise<Key[]> => {
      return ((await this.#t.json<Wire>({ method: "GET", path: "/v1/keys", call: opts })).keys ?? []).map(keyFrom);
    },
    revoke: async (keyId: string, opts?: CallOptions): Promise<void> => {
      await this.#t.none({ method: "DELETE", path: `/v1/keys/${seg("key id", keyId)}`, call: opts });
    },
  };

  /**
   * Runs a program in sandbox id with the tools granted to it; only its
   * output and the trace of its tool calls come back. With opts.tools
   * (or a callback) the run is streamed and the calls of caller-executed
   * tools are answered by those functions.
   */
  async run(id: string, req: RunRequest, opts: RunOptions = {}): Promise<RunResult> {
    return this.#run(sbPath(id, "/run"), req, opts, 0);
  }

  /**
   * Runs a program in a sandbox created for it (granted req.tools and
   * req.toolsets) and destroyed before the answer; it needs only the
   * tools:call scope.
   */
  async runOnce(req: RunRequest, opts: RunOptions = {}): Promise<RunResult> {
    return this.#run("/v1/run", req, opts, 60_000);
  }

  async #run(path: string, req: RunRequest, opts: RunOptions, extraMs: number): Promise<RunResult> {
    if (!req || !req.language || typeof req.code !== "string") throw invalid("run: language and code are required");
    const body = {
      language: req.language,
      code: req.code,
      timeout_s: req.timeoutS,
      env: req.env,
      template: req.template,
      network: networkToWire(req.network),
      limits: limitsToWire(req.limits),
      tools: req.tools,
      toolsets: req.toolsets,
    };
    const defaultTimeoutMs = Math.max(this.#t.timeoutMs, (req.timeoutS ?? 60) * 1000 + answerMarginMs + extraMs);
    const streamed = (opts.tools && Object.keys(opts.tools).length > 0) || opts.onOutput || opts.onToolCall;
    if (!streamed) {
      const w = await this.#t.json<Wire>({ method: "POST", path, json: body, call: opts, defaultTimeoutMs });
      return {
        ...execResultFrom(w),
        sandboxId: w.sandbox_id,
        toolCalls: (w.tool_calls ?? []).map(toolCallTraceFrom),
        toolCallsDropped: w.tool_calls_dropped ?? 0,
      };
    }
    return this.#runStream(path, body, opts, defaultTimeoutMs);
  }

  async #runStream(path: string, body: Wire, opts: RunOptions, defaultTimeoutMs: number): Promise<RunResult> {
    const end = new AbortController(); // ends the run: an answer failed, or the run is over
    const signal = opts.signal ? AbortSignal.any([opts.signal, end.signal]) : end.signal;
    const tools = opts.tools ?? {};
    const cap = opts.maxToolCalls && opts.maxToolCalls > 0 ? opts.maxToolCalls : 64;
    let running = 0;
    const queue: (() => void)[] = [];
    const pending = new Set<Promise<void>>();
    let answerErr: unknown;
    let sandboxId = "";
    const out = { stdout: [] as Uint8Array[], stderr: [] as Uint8Array[], n: { stdout: 0, stderr: 0 }, cut: { stdout: false, stderr: false } };
    const traces: RunResult["toolCalls"] = [];

    const answer = (l: Wire) => {
      const sb = sandboxId;
      const p = (async () => {
        if (running >= cap) await new Promise<void>((r) => queue.push(r));
        running++;
        try {
          if (signal.aborted) return;
          const fn = tools[l.tool];
          let ans: { output?: unknown; error?: string };
          try {
            if (!fn) throw new Error(`this caller runs no tool ${l.tool}`);
            ans = { output: await fn(l.args, { signal, callId: l.id, sandboxId: sb }) };
          } catch (err) {
            ans = { error: err instanceof Error ? err.message : String(err) };
          }
          try {
            await this.tools.answer(sb, l.id, ans, { signal });
          } catch (err) {
            if (!signal.aborted) {
              answerErr ??= new AirlockError(`airlock: answering tool call ${l.id} of ${l.tool}: ${(err as Error).message}`, (err as AirlockError).code ?? "internal", (err as AirlockError).status ?? 0, { cause: err });
              end.abort(answerErr); // the program would wait for the answer in vain
            }
          }
        } finally {
          running--;
          queue.shift()?.();
        }
      })();
      pending.add(p);
      void p.finally(() => pending.delete(p));
    };

    try {
      const call = { signal, timeoutMs: opts.timeoutMs ?? defaultTimeoutMs };
      for await (const l of this.#t.ndjson<Wire>({ method: "POST", path, json: body, call }, maxStreamLine)) {
        switch (l.type) {
          case "start":
            sandboxId = l.sandbox_id;
            break;
          case "stdout":
          case "stderr": {
            const s = l.type as "stdout" | "stderr";
            let data = lineData(l);
            if (opts.onOutput) {
              opts.onOutput(s, data);
              break;
            }
            const room = maxRunCollect - out.n[s];
            if (room < data.byteLength) {
              data = data.subarray(0, Math.max(room, 0));
              out.cut[s] = true;
            }
            out[s].push(data);
            out.n[s] += data.byteLength;
            break;
          }
          case "tool_request":
            answer(l);
            break;
          case "tool_call": {
            const tc = toolCallTraceFrom(l);
            traces.push(tc);
            opts.onToolCall?.(tc);
            break;
          }
          case "exit": {
            const stdoutBytes = concat(out.stdout, out.n.stdout);
            const stderrBytes = concat(out.stderr, out.n.stderr);
            const dec = new TextDecoder();
            const r = execResultFrom(l);
            return {
              ...r,
              stdout: dec.decode(stdoutBytes),
              stderr: dec.decode(stderrBytes),
              stdoutBytes,
              stderrBytes,
              stdoutTruncated: r.stdoutTruncated || out.cut.stdout,
              stderrTruncated: r.stderrTruncated || out.cut.stderr,
              sandboxId,
              toolCalls: traces,
              toolCallsDropped: l.tool_calls_dropped ?? 0,
            };
          }
          case "error":
            throw streamError(l, "run stream failed");
        }
      }
      throw new AirlockError("airlock: run stream ended without a result", "unavailable", 200);
    } catch (err) {
      throw answerErr ?? err;
    } finally {
      if (!end.signal.aborted) end.abort(new AirlockError("airlock: the run ended", "canceled", 0));
      for (const r of queue.splice(0)) r();
      await Promise.allSettled([...pending]);
    }
  }
}

function approvalSeg(id: string): string {
  if (!/^ap-[a-z2-7]{16}$/.test(id)) throw invalid(`approval ID ${JSON.stringify(id)} is malformed`);
  return id;
}

/** The events of an exec output stream (an exec, a followed process). */
async function* outputEvents(lines: AsyncGenerator<Wire, void, undefined>, what: string): AsyncGenerator<ExecEvent, void, undefined> {
  const dec = new TextDecoder();
  for await (const l of lines) {
    switch (l.type) {
      case "start":
        yield { type: "start", pid: l.pid };
        break;
      case "stdout":
      case "stderr": {
        const data = lineData(l);
        if (data.byteLength > 0) yield { type: l.type, data, text: dec.decode(data) };
        break;
      }
      case "exit":
        yield { type: "exit", result: execResultFrom(l) };
        return;
      case "error":
        throw streamError(l, `${what} failed`);
    }
  }
  throw new AirlockError(`airlock: ${what} ended without a result`, "unavailable", 200);
}
