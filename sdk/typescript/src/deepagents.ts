// A sandbox backend of the npm deepagents package (LangChain Deep
// Agents) on an Airlock sandbox: execute runs on exec, uploadFiles and
// downloadFiles on the files API, and the other file operations are
// deepagents' own BaseSandbox ones on top of those.
//
// deepagents is not a dependency of the SDK, not even for its types:
// the protocol's shapes are declared here (as deepagents 1.14 has them;
// test/deepagents.types.mts checks them against its declarations),
// which keeps its and LangChain's declarations out of the SDK's
// compilation and out of its .d.ts. Its BaseSandbox class is taken from the caller
// (options.BaseSandbox) or loaded with a dynamic import("deepagents")
// when AirlockSandbox.create or connect needs it, so the SDK loads
// without the package.

import type { Airlock } from "./airlock.js";
import { AirlockError, invalid } from "./errors.js";
import type { CreateSandboxRequest, ExecResult } from "./types.js";

// The shapes of deepagents' SandboxBackendProtocolV2 (backends/protocol.d.ts).

/** How a command ended: its stdout and stderr, its exit code, whether the output was cut. */
export interface ExecuteResponse {
  output: string;
  exitCode: number | null;
  truncated: boolean;
}

/** deepagents' error codes of a file transfer. */
export type FileOperationError = "file_not_found" | "permission_denied" | "is_directory" | "invalid_path";

/** The outcome of one file of uploadFiles. */
export interface FileUploadResponse {
  path: string;
  error: FileOperationError | null;
}

/** The outcome of one file of downloadFiles: its bytes or its error. */
export interface FileDownloadResponse {
  path: string;
  content: Uint8Array | null;
  error: FileOperationError | null;
}

/** A file of a listing; a directory's path ends in "/". */
export interface BackendFileInfo {
  path: string;
  is_dir?: boolean;
  size?: number;
  /** ISO 8601. */
  modified_at?: string;
}

/** A file's content as deepagents keeps it (its v1 lines or its v2 content). */
export type BackendFileData =
  | { content: string[]; created_at: string; modified_at: string }
  | { content: string | Uint8Array; mimeType: string; created_at: string; modified_at: string };

export interface LsResult {
  error?: string;
  files?: BackendFileInfo[];
}

export interface GlobResult {
  error?: string;
  files?: BackendFileInfo[];
  truncated?: boolean;
}

export interface GrepResult {
  error?: string;
  matches?: { path: string; line: number; text: string }[];
  truncated?: boolean;
}

export interface ReadResult {
  error?: string;
  content?: string | Uint8Array;
  mimeType?: string;
  totalLines?: number;
  startLine?: number;
  endLine?: number;
  nextOffset?: number;
}

export interface ReadRawResult {
  error?: string;
  data?: BackendFileData;
}

export interface WriteResult {
  error?: string;
  path?: string;
  filesUpdate?: Record<string, BackendFileData> | null;
  metadata?: Record<string, unknown>;
}

export interface EditResult extends WriteResult {
  occurrences?: number;
}

export interface DeleteResult {
  error?: string;
  path?: string;
  filesUpdate?: Record<string, null> | null;
  metadata?: Record<string, unknown>;
}

/** What deepagents' BaseSandbox provides on top of execute and the file transfers. */
export interface BaseSandboxMethods {
  ls(path: string): Promise<LsResult>;
  read(filePath: string, offset?: number, limit?: number): Promise<ReadResult>;
  readRaw(filePath: string): Promise<ReadRawResult>;
  grep(pattern: string, path?: string, glob?: string | null, maxCount?: number | null): Promise<GrepResult>;
  glob(pattern: string, path?: string): Promise<GlobResult>;
  write(filePath: string, content: string): Promise<WriteResult>;
  edit(filePath: string, oldString: string, newString: string, replaceAll?: boolean): Promise<EditResult>;
  delete(filePath: string): Promise<DeleteResult>;
}

/** deepagents' BaseSandbox class (import { BaseSandbox } from "deepagents"). */
export type BaseSandboxClass = abstract new () => BaseSandboxMethods;

/** How an AirlockSandbox runs commands and reaches files. */
export interface AirlockSandboxOptions {
  /**
   * deepagents' BaseSandbox class, which provides ls, read, grep, glob,
   * write, edit, readRaw and delete on top of execute and the file
   * transfers. Required by the constructor; create and connect load it
   * with import("deepagents") when it is not given.
   */
  BaseSandbox?: BaseSandboxClass;
  /** Runs commands and file operations as this user ("user" or "root"); default the sandbox's. */
  user?: string;
  /** The working directory of commands (default the template's, else the user's home). */
  cwd?: string;
  /** Environment variables added to every command. */
  env?: Record<string, string>;
  /** How long a command may run, in seconds, 1 to 3600 (default 300); execute's timeout overrides it. */
  commandTimeoutS?: number;
  /**
   * What execute returns of a command's output at most, in bytes
   * (default 1 MiB, the server's cap per stream); beyond it the output
   * is cut and flagged truncated.
   */
  maxOutputBytes?: number;
  /** The largest file downloadFiles (and so read, readRaw and edit) takes, in bytes (default 64 MiB). */
  maxFileBytes?: number;
}

/** Exit code of a command its timeout killed (as coreutils timeout(1) reports it). */
const timeoutExitCode = 124;
/** Exit code of a command the sandbox's command policy (or an approval) refused. */
const deniedExitCode = 126;
/** The longest command timeout the API allows. */
const maxCommandTimeoutS = 3600;

/** The delegates' classes, one per BaseSandbox class. */
const delegateClasses = new WeakMap<BaseSandboxClass, new (outer: AirlockSandbox) => BaseSandboxMethods>();

/**
 * An object of a subclass of Base whose execute, uploadFiles,
 * downloadFiles and id are outer's: BaseSandbox's methods, run on it,
 * act through outer (and through a subclass's overrides of outer).
 */
function delegateOf(Base: BaseSandboxClass, outer: AirlockSandbox): BaseSandboxMethods {
  let Delegate = delegateClasses.get(Base);
  if (!Delegate) {
    class AirlockDelegate extends Base {
      readonly #outer: AirlockSandbox;
      constructor(o: AirlockSandbox) {
        super();
        this.#outer = o;
      }
      get id(): string {
        return this.#outer.id;
      }
      execute(command: string): Promise<ExecuteResponse> {
        return this.#outer.execute(command);
      }
      uploadFiles(files: Array<[string, Uint8Array]>): Promise<FileUploadResponse[]> {
        return this.#outer.uploadFiles(files);
      }
      downloadFiles(paths: string[]): Promise<FileDownloadResponse[]> {
        return this.#outer.downloadFiles(paths);
      }
    }
    Delegate = AirlockDelegate;
    delegateClasses.set(Base, Delegate);
  }
  return new Delegate(outer);
}

/** Refuses a value that is not deepagents' BaseSandbox class. */
function checkBase(Base: unknown): BaseSandboxClass {
  const proto = typeof Base === "function" ? (Base as { prototype?: Record<string, unknown> }).prototype : undefined;
  if (!proto || typeof proto.read !== "function" || typeof proto.grep !== "function" || typeof proto.glob !== "function" || typeof proto.edit !== "function") {
    throw invalid("options.BaseSandbox must be the BaseSandbox class of the deepagents package");
  }
  return Base as BaseSandboxClass;
}

/** The BaseSandbox class given, else deepagents' own, loaded now. */
async function loadBase(given: BaseSandboxClass | undefined): Promise<BaseSandboxClass> {
  if (given !== undefined) return checkBase(given);
  let mod: { BaseSandbox?: unknown };
  // A variable, so that the compiler does not look for deepagents' types
  // (a bundler will not see it either: pass options.BaseSandbox there).
  const name = "deepagents";
  try {
    mod = (await import(name)) as { BaseSandbox?: unknown };
  } catch (err) {
    throw new AirlockError(
      "airlock: AirlockSandbox needs the deepagents package (npm install deepagents), or its BaseSandbox class in options.BaseSandbox",
      "failed_precondition",
      0,
      { cause: err },
    );
  }
  return checkBase(mod.BaseSandbox);
}

function checkTimeout(what: string, s: number): number {
  if (typeof s !== "number" || !Number.isFinite(s) || s <= 0 || s > maxCommandTimeoutS) {
    throw invalid(`${what} ${s} must be more than 0 and at most ${maxCommandTimeoutS} seconds`);
  }
  return Math.ceil(s);
}

/** Whether path can name a file at all: a non-empty string without NUL. */
function usablePath(path: unknown): path is string {
  return typeof path === "string" && path !== "" && !path.includes("\0");
}

/** s cut to at most max bytes of UTF-8, on a character boundary. */
function cutUTF8(s: string, max: number): string {
  const b = new TextEncoder().encode(s);
  if (b.byteLength <= max) return s;
  let end = max;
  while (end > 0 && (b[end]! & 0xc0) === 0x80) end--; // not inside a character
  return new TextDecoder().decode(b.subarray(0, end));
}

/**
 * A deepagents sandbox backend (its SandboxBackendProtocolV2) on one
 * Airlock sandbox, for createDeepAgent({ model, backend }).
 *
 * - execute runs a shell command (/bin/sh -c) with the SDK's exec and
 *   returns its stdout followed by its stderr, its exit code (124 when
 *   its timeout killed it, 128+N when signal N did, 126 when the
 *   sandbox's command policy refused it) and whether the output was cut.
 * - uploadFiles and downloadFiles move bytes with the files API, one
 *   file at a time, with deepagents' per-file error codes.
 * - ls, read, grep, glob, write, edit, readRaw and delete are
 *   deepagents' BaseSandbox ones: ls, read, grep, glob and delete run
 *   POSIX tools (find, awk, grep, rm) through execute (read returns
 *   only the lines asked for); write, edit and readRaw go through
 *   uploadFiles and downloadFiles. ls also reports a missing path or a
 *   file as an error (files/stat), where BaseSandbox lists nothing.
 *
 * ```ts
 * const airlock = new Airlock();
 * const backend = await AirlockSandbox.create(airlock, { timeoutS: 1800 });
 * try {
 *   const agent = createDeepAgent({ model, backend });
 *   await agent.invoke({ messages: [{ role: "user", content: "..." }] });
 * } finally {
 *   await backend.close(); // deletes the sandbox
 * }
 * ```
 */
export class AirlockSandbox implements BaseSandboxMethods {
  /** The client the backend calls. */
  readonly client: Airlock;
  readonly #id: string;
  readonly #base: BaseSandboxMethods;
  readonly #user: string | undefined;
  readonly #cwd: string | undefined;
  readonly #env: Record<string, string> | undefined;
  readonly #timeoutS: number;
  readonly #maxOutput: number;
  readonly #maxFile: number;
  #closed = false;

  /**
   * Wraps sandbox sandboxId; options.BaseSandbox is required here (use
   * connect to have it loaded).
   */
  constructor(client: Airlock, sandboxId: string, options: AirlockSandboxOptions) {
    if (!client || typeof client.exec !== "function") throw invalid("AirlockSandbox needs an Airlock client");
    // A malformed ID would make every file request a 400, which would
    // read as a bad path.
    if (typeof sandboxId !== "string" || !/^sb-[a-z2-7]{16}$/.test(sandboxId)) throw invalid(`sandbox ID ${JSON.stringify(sandboxId)} is malformed`);
    const o = options ?? {};
    this.client = client;
    this.#id = sandboxId;
    this.#user = o.user;
    this.#cwd = o.cwd;
    this.#env = o.env;
    this.#timeoutS = checkTimeout("commandTimeoutS", o.commandTimeoutS ?? 300);
    this.#maxOutput = o.maxOutputBytes ?? 1 << 20;
    if (!Number.isInteger(this.#maxOutput) || this.#maxOutput < 1) throw invalid(`maxOutputBytes ${o.maxOutputBytes} must be a positive integer`);
    this.#maxFile = o.maxFileBytes ?? 64 << 20;
    if (!Number.isInteger(this.#maxFile) || this.#maxFile < 1) throw invalid(`maxFileBytes ${o.maxFileBytes} must be a positive integer`);
    this.#base = delegateOf(checkBase(o.BaseSandbox), this);
  }

  /**
   * Creates a sandbox (req as for airlock.sandboxes.create) and returns
   * its backend; close deletes it. A failure after the create deletes
   * the sandbox again.
   */
  static async create(client: Airlock, req: CreateSandboxRequest = {}, options: AirlockSandboxOptions = {}): Promise<AirlockSandbox> {
    const Base = await loadBase(options.BaseSandbox);
    const sb = await client.sandboxes.create(req);
    try {
      return new AirlockSandbox(client, sb.id, { ...options, BaseSandbox: Base });
    } catch (err) {
      await client.sandboxes.delete(sb.id).catch(() => {});
      throw err;
    }
  }

  /** The backend of an existing sandbox, checked to be there. */
  static async connect(client: Airlock, sandboxId: string, options: AirlockSandboxOptions = {}): Promise<AirlockSandbox> {
    const Base = await loadBase(options.BaseSandbox);
    const sb = await client.sandboxes.get(sandboxId);
    if (sb.state !== "running") {
      throw new AirlockError(`airlock: sandbox ${sb.id} is ${sb.state}, not running`, "failed_precondition", 0);
    }
    return new AirlockSandbox(client, sb.id, { ...options, BaseSandbox: Base });
  }

  /** The sandbox's ID. */
  get id(): string {
    return this.#id;
  }

  /** False once close has run. */
  get isRunning(): boolean {
    return !this.#closed;
  }

  /** Deletes the sandbox; a second call does nothing. */
  async close(): Promise<void> {
    if (this.#closed) return;
    await this.client.sandboxes.delete(this.#id);
    this.#closed = true;
  }

  /**
   * Runs command with /bin/sh -c and returns its stdout followed by its
   * stderr (each stream in order, not interleaved), its exit code and
   * whether the output was cut (at maxOutputBytes, or by the server's
   * 1 MiB per stream). options.timeout (seconds, 1 to 3600) overrides
   * the backend's commandTimeoutS; a command it kills has exit code 124
   * and a note at the end of its output. A command that the sandbox's
   * command policy or an approver refuses is a result too (exit code
   * 126, the reason as output), so the model can choose another; other
   * API errors (a sandbox that is gone, a key without the exec scope)
   * are thrown.
   */
  async execute(command: string, options: { timeout?: number } = {}): Promise<ExecuteResponse> {
    if (typeof command !== "string") throw invalid("execute: the command must be a string");
    if (command.trim() === "") return { output: "", exitCode: 0, truncated: false };
    const timeoutS = options.timeout === undefined ? this.#timeoutS : checkTimeout("timeout", options.timeout);
    let res: ExecResult;
    try {
      res = await this.client.exec(this.#id, { command, user: this.#user, cwd: this.#cwd, env: this.#env, timeoutS });
    } catch (err) {
      // The API words both refusals "the sandbox's command policy ...";
      // a 403 for a missing scope is the caller's to fix, not the model's.
      if (err instanceof AirlockError && err.code === "permission_denied" && /command policy/.test(err.message)) {
        return { output: `Error: ${err.message}`, exitCode: deniedExitCode, truncated: false };
      }
      throw err;
    }
    let output = res.stdout;
    if (res.stderr !== "") output += (output === "" || output.endsWith("\n") ? "" : "\n") + res.stderr;
    if (res.error) output += (output === "" || output.endsWith("\n") ? "" : "\n") + `Error: ${res.error}`;
    let truncated = res.stdoutTruncated || res.stderrTruncated;
    const cut = cutUTF8(output, this.#maxOutput);
    if (cut.length < output.length) {
      output = cut;
      truncated = true;
    }
    let exitCode = res.exitCode;
    if (res.status === "timeout") {
      exitCode = timeoutExitCode;
      output += `${output === "" || output.endsWith("\n") ? "" : "\n"}[the command timed out after ${timeoutS} s and was killed]`;
    } else if (exitCode < 0) {
      exitCode = res.signal > 0 ? 128 + res.signal : 1;
      if (res.status === "resource_exceeded") output += `${output === "" || output.endsWith("\n") ? "" : "\n"}[the command was killed: it exceeded the sandbox's resource limits]`;
    }
    return { output, exitCode, truncated };
  }

  /**
   * Writes each file (parents are created, a replaced file keeps its
   * mode), one at a time. A file that cannot be written gets its error
   * code (permission_denied, is_directory, invalid_path, file_not_found)
   * and the others are still written; an error that is not the file's
   * (the sandbox is gone, the server is unreachable) is thrown.
   */
  async uploadFiles(files: Array<[string, Uint8Array]>): Promise<FileUploadResponse[]> {
    const out: FileUploadResponse[] = [];
    for (const [path, content] of files) {
      if (!usablePath(path) || !(content instanceof Uint8Array)) {
        out.push({ path, error: "invalid_path" });
        continue;
      }
      try {
        await this.client.files.write(this.#id, path, content, { user: this.#user });
        out.push({ path, error: null });
      } catch (err) {
        out.push({ path, error: await this.#fileError(err, path) });
      }
    }
    return out;
  }

  /**
   * Reads each file whole (at most maxFileBytes), one at a time, with
   * deepagents' per-file error codes (file_not_found, is_directory,
   * permission_denied, invalid_path); an error that is not the file's,
   * or a file larger than maxFileBytes, is thrown.
   */
  async downloadFiles(paths: string[]): Promise<FileDownloadResponse[]> {
    const out: FileDownloadResponse[] = [];
    for (const path of paths) {
      if (!usablePath(path)) {
        out.push({ path, content: null, error: "invalid_path" });
        continue;
      }
      try {
        const content = await this.client.files.readBytes(this.#id, path, { user: this.#user, maxBytes: this.#maxFile });
        out.push({ path, content, error: null });
      } catch (err) {
        out.push({ path, content: null, error: await this.#fileError(err, path) });
      }
    }
    return out;
  }

  /**
   * BaseSandbox's listing (find -L through execute: a symlink to a
   * directory is a directory), except that a path that is missing or
   * not a directory is an error, where BaseSandbox lists nothing.
   */
  async ls(path: string): Promise<LsResult> {
    if (!usablePath(path)) return { error: `invalid path ${JSON.stringify(path)}` };
    const res = await this.#base.ls(path);
    if (res.error || (res.files?.length ?? 0) > 0) return res;
    let type: string;
    try {
      type = (await this.client.files.stat(this.#id, path, { user: this.#user })).type;
    } catch (err) {
      const code = await this.#fileError(err, path);
      return { error: `cannot list '${path}': ${code === "file_not_found" ? "no such directory" : code.replace("_", " ")}` };
    }
    // stat describes a symlink itself; find -L followed it.
    if (type !== "dir" && type !== "symlink") return { error: `cannot list '${path}': not a directory` };
    return res;
  }

  read(filePath: string, offset?: number, limit?: number): Promise<ReadResult> {
    return this.#base.read(filePath, offset, limit);
  }

  readRaw(filePath: string): Promise<ReadRawResult> {
    return this.#base.readRaw(filePath);
  }

  grep(pattern: string, path?: string | null, glob?: string | null, maxCount?: number | null): Promise<GrepResult> {
    return this.#base.grep(pattern, path ?? undefined, glob, maxCount);
  }

  glob(pattern: string, path?: string): Promise<GlobResult> {
    return this.#base.glob(pattern, path);
  }

  write(filePath: string, content: string): Promise<WriteResult> {
    return this.#base.write(filePath, content);
  }

  edit(filePath: string, oldString: string, newString: string, replaceAll?: boolean): Promise<EditResult> {
    return this.#base.edit(filePath, oldString, newString, replaceAll);
  }

  delete(filePath: string): Promise<DeleteResult> {
    return this.#base.delete(filePath);
  }

  /**
   * The deepagents error code of a failed file request, or err thrown
   * again when it is not the file's fault. The API answers a missing
   * sandbox with 404 too (one that ended with 409): a 404 is the file's
   * only while the sandbox is there.
   */
  async #fileError(err: unknown, path: string): Promise<FileOperationError> {
    if (!(err instanceof AirlockError) || err.status === 0) throw err;
    switch (err.code) {
      case "permission_denied":
        return "permission_denied";
      case "not_found":
        await this.client.sandboxes.get(this.#id); // NotFoundError when the sandbox is gone
        return "file_not_found";
      case "invalid_argument":
      case "failed_precondition": {
        const info = await this.client.files.stat(this.#id, path, { user: this.#user }).catch(() => undefined);
        if (info?.type === "dir") return "is_directory";
        if (err.code === "invalid_argument") return "invalid_path";
        throw err;
      }
    }
    throw err;
  }
}
