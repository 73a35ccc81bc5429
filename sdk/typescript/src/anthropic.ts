// The Anthropic tool executor: runs the tool_use blocks of an Anthropic
// Messages API response in a sandbox (the client tools bash_20250124 and
// text_editor_20250728, and Airlock's program tool) and returns the
// matching tool_result blocks. The daemon does the work
// (POST /v1/sandboxes/{id}/anthropic/tool-uses, internal/toolexec/anthropic);
// this class is its client.

import { transportOf, type Airlock } from "./airlock.js";
import type { CallOptions } from "./http.js";
import { invalid } from "./errors.js";

/** A tool_use block of an Anthropic Messages API response. */
export interface AnthropicToolUseBlock {
  type: "tool_use";
  id: string;
  name: string;
  input: unknown;
}

/** A tool_result block to send back in the next user message. */
export interface AnthropicToolResultBlock {
  type: "tool_result";
  tool_use_id: string;
  content: string;
  is_error?: boolean;
}

/** A Messages API response (or anything with its content blocks). */
export interface AnthropicMessageLike {
  content: ReadonlyArray<{ type: string }>;
}

/** The name of Airlock's program tool. */
export const anthropicProgramTool = "airlock_run_program";

/**
 * The tool definitions the executor serves, for the request's tools:
 * bash, the text editor, and Airlock's program tool (a program in
 * Python, JavaScript or bash that may call the sandbox's gateway tools;
 * only its output comes back).
 */
export const anthropicTools = [
  { type: "bash_20250124", name: "bash" },
  { type: "text_editor_20250728", name: "str_replace_based_edit_tool" },
  {
    name: anthropicProgramTool,
    description:
      "Run a program in the sandbox and get its output. The program may call the tools granted to the sandbox: " +
      "in Python `from tools import NAME` then `NAME(arg=...)`, in JavaScript `const { NAME } = require('tools')` " +
      "then `await NAME({...})`. Only the program's output and the outcome of each tool call come back.",
    input_schema: {
      type: "object",
      properties: {
        language: { type: "string", enum: ["python", "javascript", "bash"] },
        code: { type: "string", description: "The program's source." },
        timeout_s: { type: "integer", minimum: 1, maximum: 3600, description: "How long it may run (default 60)." },
      },
      required: ["language", "code"],
    },
  },
] as const;

/** How an executor is made. */
export interface AnthropicExecutorOptions {
  /**
   * Names the conversation: its bash session (the process is tagged
   * anthropic-bash-<sessionId>) and the order of its tool uses. Two
   * executors with the same key, sandbox and sessionId share a shell.
   * Default: a random name per executor.
   */
  sessionId?: string;
  /** Runs bash, programs and file edits as this user ("user" or "root"); default the sandbox's. */
  user?: string;
  /** The working directory bash starts in (default the user's home). */
  cwd?: string;
  /** Environment variables of the bash session. */
  env?: Record<string, string>;
  /** How long one bash command may run (default 120 000 ms). */
  bashTimeoutMs?: number;
  /** How long the bash session lives at most, in seconds (default 3600). */
  sessionTimeoutS?: number;
  /** What a tool result keeps of a command's output, in characters (default 65 536). */
  maxOutputChars?: number;
  /** The largest file the editor reads (default and at most 16 MiB). */
  maxFileBytes?: number;
  /** The program tool's timeout when the model gives none, in seconds (default 60). */
  programTimeoutS?: number;
}

const sessionPattern = /^[A-Za-z0-9._-]{1,48}$/;
/** The wait for one tool use beyond its own timeout. */
const useMarginMs = 60_000;

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function randomHex(bytes: number): string {
  const b = new Uint8Array(bytes);
  crypto.getRandomValues(b);
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

/**
 * Runs the client tools of Anthropic's Messages API in one sandbox, for
 * one conversation: bash (bash_20250124) in a persistent session, the
 * text editor (text_editor_20250728, str_replace_based_edit_tool) and
 * Airlock's program tool (airlock_run_program). The daemon runs them
 * with this client's key; a tool that fails becomes an is_error
 * result. runToolUses rejects for a malformed message and for the API's
 * refusals of the sandbox itself (a missing sandbox, a key without the
 * scope), as typed errors.
 *
 * ```ts
 * const ex = new AnthropicExecutor(airlock, sb.id, { sessionId: "chat-1" });
 * const results = await ex.runToolUses(response); // tool_result blocks
 * await ex.close();
 * ```
 */
export class AnthropicExecutor {
  readonly #airlock: Airlock;
  readonly #sandboxId: string;
  readonly #session: string;
  readonly #o: AnthropicExecutorOptions;

  constructor(airlock: Airlock, sandboxId: string, opts: AnthropicExecutorOptions = {}) {
    if (!airlock || typeof airlock.execStream !== "function") throw invalid("AnthropicExecutor needs an Airlock client");
    if (typeof sandboxId !== "string" || sandboxId === "" || /[/?#]/.test(sandboxId)) throw invalid("AnthropicExecutor needs a sandbox id");
    const o = opts;
    if (o.bashTimeoutMs !== undefined && !(Number.isInteger(o.bashTimeoutMs) && o.bashTimeoutMs > 0)) throw invalid(`bashTimeoutMs ${o.bashTimeoutMs} must be a positive integer`);
    if (o.maxOutputChars !== undefined && !(Number.isInteger(o.maxOutputChars) && o.maxOutputChars >= 1024)) throw invalid(`maxOutputChars ${o.maxOutputChars} must be at least 1024`);
    if (o.maxFileBytes !== undefined && !(Number.isInteger(o.maxFileBytes) && o.maxFileBytes > 0)) throw invalid(`maxFileBytes ${o.maxFileBytes} must be a positive integer`);
    for (const k of ["sessionTimeoutS", "programTimeoutS"] as const) {
      const v = o[k];
      if (v !== undefined && !(Number.isInteger(v) && v >= 1)) throw invalid(`${k} ${v} must be a positive integer`);
    }
    if (o.sessionId !== undefined && !sessionPattern.test(o.sessionId)) {
      throw invalid(`sessionId ${JSON.stringify(o.sessionId)} must be 1 to 48 letters, digits, '.', '_' or '-'`);
    }
    this.#airlock = airlock;
    this.#sandboxId = sandboxId;
    this.#session = o.sessionId ?? `ex-${randomHex(8)}`;
    this.#o = { ...o };
  }

  /** The tool definitions to send in the request's tools. */
  static readonly tools = anthropicTools;

  /** The sandbox the tools run in. */
  get sandboxId(): string {
    return this.#sandboxId;
  }

  /** The conversation's name (the sessionId, or the random one). */
  get sessionId(): string {
    return this.#session;
  }

  /**
   * Runs every tool_use block of message (a Messages API response, or
   * its content array), one after the other, and returns their
   * tool_result blocks in the same order.
   */
  async runToolUses(message: AnthropicMessageLike | AnthropicMessageLike["content"], opts: CallOptions = {}): Promise<AnthropicToolResultBlock[]> {
    const content = Array.isArray(message) ? message : (message as AnthropicMessageLike)?.content;
    if (!Array.isArray(content)) throw invalid("runToolUses: the message has no content array");
    const uses = (content as readonly unknown[]).filter((b) => isRecord(b) && b.type === "tool_use") as AnthropicToolUseBlock[];
    for (const u of uses) {
      if (typeof u.id !== "string" || u.id === "") throw invalid("runToolUses: a tool_use block has no id");
    }
    if (uses.length === 0) return [];
    const o = this.#o;
    const t = transportOf(this.#airlock);
    // Each use may take its own timeout; the call waits for them all.
    let waitMs = t.timeoutMs;
    for (const u of uses) {
      const input = isRecord(u.input) ? u.input : {};
      if (u.name === "bash") waitMs += (o.bashTimeoutMs ?? 120_000) + useMarginMs;
      else if (u.name === anthropicProgramTool) waitMs += (typeof input.timeout_s === "number" ? input.timeout_s : (o.programTimeoutS ?? 60)) * 1000 + useMarginMs;
      else waitMs += useMarginMs;
    }
    const w = await t.json<{ content: AnthropicToolResultBlock[] }>({
      method: "POST",
      path: `/v1/sandboxes/${encodeURIComponent(this.#sandboxId)}/anthropic/tool-uses`,
      json: {
        message: { content: uses },
        session: this.#session,
        user: o.user,
        cwd: o.cwd,
        env: o.env,
        bash_timeout_ms: o.bashTimeoutMs,
        session_timeout_s: o.sessionTimeoutS,
        max_output_chars: o.maxOutputChars,
        max_file_bytes: o.maxFileBytes,
        program_timeout_s: o.programTimeoutS,
      },
      call: opts,
      defaultTimeoutMs: waitMs,
    });
    return w.content.map((r) => (r.is_error ? r : { type: r.type, tool_use_id: r.tool_use_id, content: r.content }));
  }

  /** Runs one tool_use block. */
  async runToolUse(use: AnthropicToolUseBlock, opts: CallOptions = {}): Promise<AnthropicToolResultBlock> {
    const [r] = await this.runToolUses([use], opts);
    return r!;
  }

  /** Ends the bash session (the next bash call starts another); waits until the shell is gone. */
  async close(opts: CallOptions = {}): Promise<void> {
    await transportOf(this.#airlock).none({
      method: "DELETE",
      path: `/v1/sandboxes/${encodeURIComponent(this.#sandboxId)}/anthropic/sessions/${this.#session}`,
      expect: [204],
      call: opts,
      defaultTimeoutMs: 60_000,
    });
  }
}
