// The Anthropic tool executor: runs the tool_use blocks of an Anthropic
// Messages API response in a sandbox (the client tools bash_20250124 and
// text_editor_20250728) and returns the matching tool_result blocks.

import type { Airlock } from "./airlock.js";
import { AirlockError, NotFoundError, invalid } from "./errors.js";
import type { ExecEvent, ExecResult } from "./types.js";

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

/** The tool definitions the executor serves, for the request's tools. */
export const anthropicTools = [
  { type: "bash_20250124", name: "bash" },
  { type: "text_editor_20250728", name: "str_replace_based_edit_tool" },
] as const;

/** How an executor is made. */
export interface AnthropicExecutorOptions {
  /** Names the conversation; the bash process is tagged anthropic-bash-<sessionId>. */
  sessionId?: string;
  /** Runs bash and edits files as this user ("user" or "root"); default the sandbox's. */
  user?: string;
  /** The working directory bash starts in (default the user's home). */
  cwd?: string;
  /** Environment variables of the bash session. */
  env?: Record<string, string>;
  /** How long one bash command may run (default 120 000 ms). */
  bashTimeoutMs?: number;
  /** How long the bash session lives at most, in seconds (default 3600, the server's usual cap). */
  sessionTimeoutS?: number;
  /** What a tool result keeps of a command's output, in characters (default 65 536). */
  maxOutputChars?: number;
  /** The largest file the editor reads (default 16 MiB). */
  maxFileBytes?: number;
}

/** A tool failure the model is told about (an is_error result). */
class ToolError extends Error {}

/** A command line longer than this is refused. */
const maxCommandChars = 1 << 20;

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function randomHex(bytes: number): string {
  const b = new Uint8Array(bytes);
  crypto.getRandomValues(b);
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

/** s as a bash $'...' string: every byte of it survives, control characters included. */
function ansiC(s: string): string {
  let out = "$'";
  for (const ch of s) {
    const c = ch.codePointAt(0)!;
    if (ch === "\\") out += "\\\\";
    else if (ch === "'") out += "\\'";
    else if (c < 0x20 || c === 0x7f) out += "\\x" + c.toString(16).padStart(2, "0");
    else out += ch;
  }
  return out + "'";
}

/** The output of one command: its head and its tail once it passed the cap. */
class Capped {
  head = "";
  tail = "";
  cut = 0;
  constructor(readonly max: number) {}

  /** Moves what passed the cap out of the middle; keep chars at the end stay searchable. */
  trim(keep: number): void {
    const half = Math.floor(this.max / 2);
    if (this.head.length + this.tail.length <= this.max + keep) return;
    if (this.head.length < half) {
      const n = half - this.head.length;
      this.head += this.tail.slice(0, n);
      this.tail = this.tail.slice(n);
    }
    const tailMax = this.max - half + keep;
    if (this.tail.length > tailMax) {
      this.cut += this.tail.length - tailMax;
      this.tail = this.tail.slice(this.tail.length - tailMax);
    }
  }

  text(tail: string): string {
    if (this.cut === 0) return this.head + tail;
    return `${this.head}\n[... ${this.cut} characters of output cut ...]\n${tail}`;
  }
}

/**
 * One persistent bash process: a streamed exec kept open, with stdin
 * kept open for the commands and stderr merged into stdout.
 */
class BashSession {
  /** Set once the process ended (its result) or the stream failed. */
  ended?: ExecResult | Error;
  timedOut = false;
  readonly #out: Capped;
  #pending = "";
  #running = false;
  #wake: (() => void) | undefined;
  readonly #pump: Promise<void>;

  private constructor(
    readonly airlock: Airlock,
    readonly sandboxId: string,
    readonly pid: number,
    readonly user: string | undefined,
    it: AsyncGenerator<ExecEvent, void, undefined>,
    maxChars: number,
  ) {
    this.#out = new Capped(maxChars);
    const dec = { stdout: new TextDecoder(), stderr: new TextDecoder() };
    this.#pump = (async () => {
      try {
        for await (const ev of it) {
          if (ev.type === "stdout" || ev.type === "stderr") {
            this.#pending += dec[ev.type].decode(ev.data, { stream: true });
            // Between commands nobody takes the output (a background
            // job's): only its end is kept.
            if (!this.#running && this.#pending.length > 2 * maxChars) this.#pending = this.#pending.slice(-maxChars);
            this.#wake?.();
          } else if (ev.type === "exit") {
            this.ended = ev.result;
          }
        }
        this.ended ??= new AirlockError("airlock: the bash stream ended without an exit", "unavailable", 0);
      } catch (err) {
        this.ended = err instanceof Error ? err : new Error(String(err));
      } finally {
        this.#wake?.();
      }
    })();
  }

  static async start(airlock: Airlock, sandboxId: string, o: Required<Pick<AnthropicExecutorOptions, "sessionTimeoutS" | "maxOutputChars">> & AnthropicExecutorOptions): Promise<BashSession> {
    const it = airlock.execStream(sandboxId, {
      // The inner bash reads the commands from stdin; 2>&1 merges stderr
      // into stdout so the output keeps its order.
      cmd: ["/bin/bash", "-c", "exec /bin/bash --noprofile --norc 2>&1"],
      background: true,
      keepStdin: true,
      tag: `anthropic-bash${o.sessionId ? "-" + o.sessionId : ""}`.slice(0, 64),
      timeoutS: o.sessionTimeoutS,
      user: o.user,
      cwd: o.cwd,
      env: o.env,
    });
    const first = await it.next();
    if (first.done || first.value.type !== "start") {
      await it.return();
      throw new AirlockError("airlock: the bash session did not start", "unavailable", 0);
    }
    return new BashSession(airlock, sandboxId, first.value.pid, o.user, it, o.maxOutputChars);
  }

  /**
   * Runs command in the session and returns its output and exit status;
   * null status when the command did not finish within timeoutMs (the
   * session is then killed) or the shell ended.
   */
  async run(command: string, timeoutMs: number): Promise<{ output: string; status: number | null; why?: "timeout" | "ended" }> {
    const nonce = randomHex(12);
    // The marker is printed from two arguments so that a trace (set -x)
    // of the printf never shows it whole. The command is evaluated with
    // stdin from /dev/null so that it cannot read the session's input.
    const script =
      `__airlock_cmd=${ansiC(command)}\n` +
      `eval "$__airlock_cmd" </dev/null\n` +
      `printf '\\n%s%s:%s\\n' __AIRLOCK_ ${nonce}__ "$?"\n`;
    const marker = `\n__AIRLOCK_${nonce}__:`;
    const out = this.#out;
    // Output that came after the last command's marker (a background
    // job's) belongs to this one.
    this.#pending = out.tail + this.#pending;
    out.head = "";
    out.tail = "";
    out.cut = 0;
    this.#running = true;
    try {
      await this.airlock.processes.sendStdin(this.sandboxId, this.pid, script);
      return await this.#collect(marker, Date.now() + timeoutMs);
    } finally {
      this.#running = false;
    }
  }

  /** Collects the output up to marker and the exit status after it. */
  async #collect(marker: string, deadline: number): Promise<{ output: string; status: number | null; why?: "timeout" | "ended" }> {
    const out = this.#out;
    for (;;) {
      out.tail += this.#pending;
      this.#pending = "";
      const at = out.tail.indexOf(marker);
      if (at >= 0) {
        const nl = out.tail.indexOf("\n", at + marker.length);
        if (nl >= 0) {
          const status = Number(out.tail.slice(at + marker.length, nl));
          const rest = out.tail.slice(nl + 1);
          out.tail = out.tail.slice(0, at);
          out.trim(0);
          const text = out.text(out.tail);
          out.tail = rest;
          return { output: text, status };
        }
      }
      out.trim(marker.length + 16);
      const rest = () => {
        out.trim(0);
        const text = out.text(out.tail);
        out.tail = "";
        return text;
      };
      if (this.ended) return { output: rest(), status: null, why: "ended" };
      const left = deadline - Date.now();
      if (left <= 0) {
        this.timedOut = true;
        const text = rest();
        await this.kill();
        return { output: text, status: null, why: "timeout" };
      }
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.#wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      this.#wake = undefined;
    }
  }

  /** Kills the shell and whatever it runs (its process group), and waits for the stream's end. */
  async kill(): Promise<void> {
    if (!this.ended) {
      try {
        // The shell leads its own session, so its group is its pid.
        await this.airlock.exec(this.sandboxId, { command: `kill -KILL -- -${this.pid}`, user: this.user, timeoutS: 10 });
      } catch {
        // The group kill is best effort; the signal below reaches the shell.
      }
      await this.airlock.processes.signal(this.sandboxId, this.pid, "KILL").catch(() => {});
    }
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([this.#pump, new Promise<void>((r) => (timer = setTimeout(r, 10_000)))]);
    clearTimeout(timer);
  }
}

/** The first line of a result of a command that failed. */
function statusNote(status: number): string {
  return `[exit status ${status}]`;
}

/** A file's text, and whether its lines end in CRLF (every one of them). */
function decodeText(path: string, bytes: Uint8Array): { text: string; crlf: boolean } {
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    throw new ToolError(`The file ${path} is not UTF-8 text (a binary file?); it cannot be viewed or edited with this tool.`);
  }
  if (text.includes("\0")) {
    throw new ToolError(`The file ${path} contains NUL bytes (a binary file?); it cannot be viewed or edited with this tool.`);
  }
  const lf = text.split("\n").length - 1;
  const crlf = lf > 0 && text.split("\r\n").length - 1 === lf;
  return { text: crlf ? text.replaceAll("\r\n", "\n") : text, crlf };
}

/** The number of lines of text (a last line without a newline counts). */
function lineCount(text: string): number {
  if (text === "") return 0;
  const n = text.split("\n").length;
  return text.endsWith("\n") ? n - 1 : n;
}

/** Lines of text numbered from first, as cat -n prints them. */
function numbered(lines: string[], first: number): string {
  return lines.map((l, i) => `${String(first + i).padStart(6)}\t${l.endsWith("\r") ? l.slice(0, -1) : l}`).join("\n");
}

function stringArg(input: Record<string, unknown>, name: string, command: string): string {
  const v = input[name];
  if (typeof v !== "string") throw new ToolError(`Parameter \`${name}\` is required for command: ${command}`);
  return v;
}

/**
 * Runs the client tools of Anthropic's Messages API in one sandbox, for
 * one conversation: bash (bash_20250124) in a persistent session, and
 * the text editor (text_editor_20250728, str_replace_based_edit_tool).
 * A tool that fails becomes an is_error result; runToolUses rejects only
 * for a malformed message.
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
  readonly #o: Required<Pick<AnthropicExecutorOptions, "bashTimeoutMs" | "sessionTimeoutS" | "maxOutputChars" | "maxFileBytes">> & AnthropicExecutorOptions;
  #bash: BashSession | undefined;
  #queue: Promise<unknown> = Promise.resolve();

  constructor(airlock: Airlock, sandboxId: string, opts: AnthropicExecutorOptions = {}) {
    if (!airlock || typeof airlock.execStream !== "function") throw invalid("AnthropicExecutor needs an Airlock client");
    if (typeof sandboxId !== "string" || sandboxId === "") throw invalid("AnthropicExecutor needs a sandbox id");
    const o = {
      ...opts,
      bashTimeoutMs: opts.bashTimeoutMs ?? 120_000,
      sessionTimeoutS: opts.sessionTimeoutS ?? 3600,
      maxOutputChars: opts.maxOutputChars ?? 64 << 10,
      maxFileBytes: opts.maxFileBytes ?? 16 << 20,
    };
    if (!(o.bashTimeoutMs > 0)) throw invalid(`bashTimeoutMs ${o.bashTimeoutMs} must be positive`);
    if (!(o.maxOutputChars >= 1024)) throw invalid(`maxOutputChars ${o.maxOutputChars} must be at least 1024`);
    if (!(o.maxFileBytes > 0)) throw invalid(`maxFileBytes ${o.maxFileBytes} must be positive`);
    if (!Number.isInteger(o.sessionTimeoutS) || o.sessionTimeoutS < 1) throw invalid(`sessionTimeoutS ${o.sessionTimeoutS} must be a positive integer`);
    if (o.sessionId !== undefined && !/^[A-Za-z0-9._-]{1,48}$/.test(o.sessionId)) {
      throw invalid(`sessionId ${JSON.stringify(o.sessionId)} must be 1 to 48 letters, digits, '.', '_' or '-'`);
    }
    this.#airlock = airlock;
    this.#sandboxId = sandboxId;
    this.#o = o;
  }

  /** The tool definitions to send in the request's tools. */
  static readonly tools = anthropicTools;

  /** The sandbox the tools run in. */
  get sandboxId(): string {
    return this.#sandboxId;
  }

  /**
   * Runs every tool_use block of message (a Messages API response, or
   * its content array), one after the other, and returns their
   * tool_result blocks in the same order.
   */
  async runToolUses(message: AnthropicMessageLike | AnthropicMessageLike["content"]): Promise<AnthropicToolResultBlock[]> {
    const content = Array.isArray(message) ? message : (message as AnthropicMessageLike)?.content;
    if (!Array.isArray(content)) throw invalid("runToolUses: the message has no content array");
    const uses = (content as readonly unknown[]).filter((b) => isRecord(b) && b.type === "tool_use") as AnthropicToolUseBlock[];
    const results: AnthropicToolResultBlock[] = [];
    for (const use of uses) {
      if (typeof use.id !== "string" || use.id === "") throw invalid("runToolUses: a tool_use block has no id");
      results.push(await this.runToolUse(use));
    }
    return results;
  }

  /** Runs one tool_use block; a failure is an is_error result. */
  async runToolUse(use: AnthropicToolUseBlock): Promise<AnthropicToolResultBlock> {
    const run = this.#queue.then(() => this.#dispatch(use));
    this.#queue = run.catch(() => {});
    try {
      return { type: "tool_result", tool_use_id: use.id, content: await run };
    } catch (err) {
      const msg = err instanceof ToolError ? err.message : `Error: ${err instanceof Error ? err.message : String(err)}`;
      return { type: "tool_result", tool_use_id: use.id, content: msg, is_error: true };
    }
  }

  /** Ends the bash session (it is started again by the next bash call). */
  async close(): Promise<void> {
    const b = this.#bash;
    this.#bash = undefined;
    await b?.kill();
  }

  async #dispatch(use: AnthropicToolUseBlock): Promise<string> {
    if (!isRecord(use.input)) throw new ToolError(`The input of tool ${JSON.stringify(use.name)} must be an object.`);
    switch (use.name) {
      case "bash":
        return this.#runBash(use.input);
      case "str_replace_based_edit_tool":
        return this.#runEditor(use.input);
      default:
        throw new ToolError(`Unknown tool ${JSON.stringify(use.name)}: this executor runs bash and str_replace_based_edit_tool.`);
    }
  }

  async #runBash(input: Record<string, unknown>): Promise<string> {
    if (input.restart === true) {
      await this.close();
      this.#bash = await BashSession.start(this.#airlock, this.#sandboxId, this.#o);
      return "The bash session has been restarted.";
    }
    const command = input.command;
    if (typeof command !== "string" || command.trim() === "") throw new ToolError("Parameter `command` is required unless `restart` is true.");
    if (command.length > maxCommandChars) throw new ToolError(`The command is longer than ${maxCommandChars} characters.`);
    if (command.includes("\0")) throw new ToolError("The command contains a NUL character.");
    if (this.#bash?.timedOut) {
      throw new ToolError("The bash session timed out and must be restarted: call the tool with {\"restart\": true}.");
    }
    if (!this.#bash || this.#bash.ended) {
      this.#bash = await BashSession.start(this.#airlock, this.#sandboxId, this.#o);
    }
    const b = this.#bash;
    const r = await b.run(command, this.#o.bashTimeoutMs);
    if (r.why === "timeout") {
      const s = Math.round(this.#o.bashTimeoutMs / 100) / 10;
      const so = r.output ? `\nOutput before the timeout:\n${r.output}` : "";
      throw new ToolError(`The command did not finish within ${s} s and was killed with the bash session. Restart the session with {"restart": true} before the next command.${so}`);
    }
    if (r.why === "ended") {
      const e = b.ended;
      const how = e instanceof Error ? `failed: ${e.message}` : e ? `ended (${e.status}, exit code ${e.exitCode})` : "ended";
      this.#bash = undefined;
      const so = r.output ? `${r.output}\n` : "";
      throw new ToolError(`${so}The bash session ${how}; the next command starts a new one.`);
    }
    let text = r.output;
    if (r.status !== 0) text = text ? `${text}\n${statusNote(r.status!)}` : statusNote(r.status!);
    return text === "" ? "(no output)" : text;
  }

  async #readText(path: string): Promise<{ text: string; crlf: boolean }> {
    let bytes: Uint8Array;
    try {
      bytes = await this.#airlock.files.readBytes(this.#sandboxId, path, { user: this.#o.user, maxBytes: this.#o.maxFileBytes });
    } catch (err) {
      if (err instanceof NotFoundError) throw new ToolError(`The path ${path} does not exist.`);
      if (err instanceof AirlockError && err.code === "response_too_large") {
        throw new ToolError(`The file ${path} is larger than ${this.#o.maxFileBytes} bytes; view a part of it with bash (sed -n, head, tail).`);
      }
      throw err;
    }
    return decodeText(path, bytes);
  }

  async #writeText(path: string, text: string, crlf: boolean): Promise<void> {
    await this.#airlock.files.write(this.#sandboxId, path, crlf ? text.replaceAll("\n", "\r\n") : text, { user: this.#o.user });
  }

  /** The entry at path, or a ToolError when there is none. */
  async #stat(path: string) {
    try {
      return await this.#airlock.files.stat(this.#sandboxId, path, { user: this.#o.user });
    } catch (err) {
      if (err instanceof NotFoundError) throw new ToolError(`The path ${path} does not exist.`);
      throw err;
    }
  }

  async #runEditor(input: Record<string, unknown>): Promise<string> {
    const command = input.command;
    const path = input.path;
    if (typeof command !== "string") throw new ToolError("Parameter `command` is required.");
    if (typeof path !== "string" || path === "" || path.includes("\0")) throw new ToolError("Parameter `path` is required and must be a file path.");
    switch (command) {
      case "view":
        return this.#view(path, input);
      case "create": {
        const text = stringArg(input, "file_text", command);
        const st = await this.#stat(path).catch((err) => (err instanceof ToolError ? undefined : Promise.reject(err)));
        if (st?.type === "dir") throw new ToolError(`The path ${path} is a directory.`);
        await this.#airlock.files.write(this.#sandboxId, path, text, { user: this.#o.user });
        return `File created successfully at: ${path}`;
      }
      case "str_replace":
        return this.#strReplace(path, input);
      case "insert":
        return this.#insert(path, input);
      case "undo_edit":
        throw new ToolError("The command undo_edit is not supported by text_editor_20250728.");
      default:
        throw new ToolError(`Unrecognized command ${JSON.stringify(command)}. The allowed commands are: view, create, str_replace, insert.`);
    }
  }

  async #view(path: string, input: Record<string, unknown>): Promise<string> {
    const max = input.max_characters;
    if (max !== undefined && max !== null && !(Number.isInteger(max) && (max as number) > 0)) {
      throw new ToolError("Parameter `max_characters` must be a positive integer.");
    }
    const range = input.view_range;
    const st = await this.#stat(path);
    let out: string;
    if (st.type === "dir") {
      if (range !== undefined && range !== null) throw new ToolError("The `view_range` parameter is not allowed when `path` points to a directory.");
      const { entries, truncated } = await this.#airlock.files.list(this.#sandboxId, path, { depth: 2, user: this.#o.user });
      const root = st.path.replace(/\/+$/, "");
      const lines = entries
        .filter((e) => !e.path.slice(root.length + 1).split("/").some((c) => c.startsWith(".")))
        .map((e) => (e.type === "dir" ? `${e.path}/` : e.path))
        .sort();
      out =
        `Here are the files and directories up to 2 levels deep in ${st.path}, excluding hidden items:\n` +
        [`${root}/`, ...lines].join("\n") +
        (truncated ? "\n[the listing was cut: the directory has more entries]" : "") +
        "\n";
    } else {
      if (st.type !== "file") throw new ToolError(`The path ${path} is not a regular file or directory.`);
      const { text } = await this.#readText(path);
      const n = lineCount(text);
      const lines = n === 0 ? [] : text.split("\n").slice(0, n);
      let first = 1;
      let shown = lines;
      if (range !== undefined && range !== null) {
        if (!Array.isArray(range) || range.length !== 2 || !range.every((x) => Number.isInteger(x))) {
          throw new ToolError("Invalid `view_range`. It should be a list of two integers.");
        }
        const [a, b] = range as [number, number];
        const r = JSON.stringify(range);
        if (a < 1 || a > n) throw new ToolError(`Invalid \`view_range\`: ${r}. Its first element \`${a}\` should be within the range of lines of the file: [1, ${n}]`);
        if (b !== -1 && b > n) throw new ToolError(`Invalid \`view_range\`: ${r}. Its second element \`${b}\` should be smaller than the number of lines in the file: \`${n}\``);
        if (b !== -1 && b < a) throw new ToolError(`Invalid \`view_range\`: ${r}. Its second element \`${b}\` should be larger or equal than its first \`${a}\``);
        first = a;
        shown = lines.slice(a - 1, b === -1 ? n : b);
      }
      out = `Here's the result of running \`cat -n\` on ${path}:\n${numbered(shown, first)}\n`;
    }
    if (typeof max === "number" && out.length > max) {
      out = `${out.slice(0, max)}\n[output truncated to ${max} of ${out.length} characters]`;
    }
    return out;
  }

  /** A few numbered lines around the lines from line start (0-based) on, count of them. */
  #snippet(path: string, text: string, start: number, count: number): string {
    const lines = text.split("\n");
    const from = Math.max(0, start - 4);
    const to = Math.min(lineCount(text), start + count + 4);
    return `Here's the result of running \`cat -n\` on a snippet of ${path}:\n${numbered(lines.slice(from, to), from + 1)}\n`;
  }

  async #strReplace(path: string, input: Record<string, unknown>): Promise<string> {
    let oldStr = stringArg(input, "old_str", "str_replace");
    const newRaw = input.new_str ?? "";
    if (typeof newRaw !== "string") throw new ToolError("Parameter `new_str` must be a string.");
    if (oldStr === "") throw new ToolError("Parameter `old_str` must not be empty.");
    await this.#regular(path);
    const { text, crlf } = await this.#readText(path);
    let newStr = newRaw;
    if (crlf) {
      oldStr = oldStr.replaceAll("\r\n", "\n");
      newStr = newStr.replaceAll("\r\n", "\n");
    }
    let count = 0;
    let at = -1;
    for (let i = text.indexOf(oldStr); i >= 0; i = text.indexOf(oldStr, i + oldStr.length)) {
      if (count === 0) at = i;
      count++;
    }
    if (count === 0) throw new ToolError("No match found for replacement. Please check your text and try again.");
    if (count > 1) throw new ToolError(`Found ${count} matches for replacement text. Please provide more context to make a unique match.`);
    const edited = text.slice(0, at) + newStr + text.slice(at + oldStr.length);
    await this.#writeText(path, edited, crlf);
    const startLine = text.slice(0, at).split("\n").length - 1;
    return `The file ${path} has been edited. ${this.#snippet(path, edited, startLine, newStr.split("\n").length)}Review the changes and make sure they are as expected. Edit the file again if necessary.`;
  }

  async #insert(path: string, input: Record<string, unknown>): Promise<string> {
    const line = input.insert_line;
    const addRaw = input.new_str ?? input.insert_text;
    if (typeof addRaw !== "string") throw new ToolError("Parameter `new_str` (or `insert_text`) is required for command: insert");
    if (!Number.isInteger(line)) throw new ToolError("Parameter `insert_line` is required for command: insert and must be an integer.");
    await this.#regular(path);
    const { text, crlf } = await this.#readText(path);
    const add = crlf ? addRaw.replaceAll("\r\n", "\n") : addRaw;
    const n = lineCount(text);
    const k = line as number;
    if (k < 0 || k > n) throw new ToolError(`Invalid \`insert_line\` parameter: ${k}. It should be within the range of lines of the file: [0, ${n}]`);
    // The offset just after line k, giving the file a last newline where it lacks one.
    let base = text;
    let off = 0;
    for (let i = 0; i < k; i++) off = base.indexOf("\n", off) + 1 || base.length;
    if (k === n && n > 0 && !base.endsWith("\n")) {
      base += "\n";
      off = base.length;
    }
    const block = add.endsWith("\n") || add === "" ? add : `${add}\n`;
    const edited = base.slice(0, off) + block + base.slice(off);
    await this.#writeText(path, edited, crlf);
    return `The file ${path} has been edited. ${this.#snippet(path, edited, k, block.split("\n").length - 1)}Review the changes and make sure they are as expected (correct indentation, no duplicate lines, etc). Edit the file again if necessary.`;
  }

  /** Refuses a path that is not a regular file. */
  async #regular(path: string): Promise<void> {
    const st = await this.#stat(path);
    if (st.type === "dir") throw new ToolError(`The path ${path} is a directory; only view works on a directory.`);
    if (st.type !== "file") throw new ToolError(`The path ${path} is not a regular file.`);
  }
}
