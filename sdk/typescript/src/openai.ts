// The OpenAI tool executor: runs the client-executed tool calls of an
// OpenAI Responses API response (the shell tool, the local shell tool,
// apply_patch and Airlock's airlock_run_program function) in a sandbox,
// through the daemon's POST /v1/sandboxes/{id}/openai/tool-calls, and
// returns the items to send back as the next request's input. The same
// route backs AirlockShell and AirlockEditor, the Shell and Editor of the
// @openai/agents SDK's shellTool and applyPatchTool.

import { type Airlock, transportOf } from "./airlock.js";
import { invalid } from "./errors.js";
import type { CallOptions } from "./http.js";

/** The function tool the route runs: a program that may call the sandbox's gateway tools. */
export const runProgramToolName = "airlock_run_program";

/**
 * The tool definitions to pass in a Responses API request's tools: the
 * shell tool (run locally, that is by the caller, here in the sandbox),
 * apply_patch, and the airlock_run_program function.
 */
export const openaiTools = [
  { type: "shell", environment: { type: "local" } },
  { type: "apply_patch" },
  {
    type: "function",
    name: runProgramToolName,
    description:
      "Runs a program in the sandbox. It can call the tools granted to the sandbox through Airlock's tool gateway " +
      "(Python: from tools import NAME; JavaScript: require('tools'); bash: the tool command). Returns its exit code, output and the trace of its tool calls.",
    parameters: {
      type: "object",
      properties: {
        language: { type: "string", enum: ["python", "javascript", "bash"], description: "The program's language." },
        code: { type: "string", description: "The program." },
        timeout_s: { type: ["integer", "null"], description: "Seconds it may run (default 60, at most 600)." },
      },
      required: ["language", "code", "timeout_s"],
      additionalProperties: false,
    },
    strict: true,
  },
] as const;

/** An output item of a Responses API response (only type is read here). */
export interface OpenAIOutputItem {
  type: string;
  [key: string]: unknown;
}

/** A response, or anything with its output items. */
export interface OpenAIResponseLike {
  output: ReadonlyArray<OpenAIOutputItem>;
}

/** One command's output in a shell_call_output. */
export interface OpenAIShellCommandOutput {
  stdout: string;
  stderr: string;
  outcome: { type: "exit"; exit_code: number } | { type: "timeout" };
}

/** Who made a call: the model directly, or a program of programmatic tool calling. */
export type OpenAIToolCaller = { type: "direct" } | { type: "program"; caller_id: string };

/** An item the route answers a call with: shell_call_output, local_shell_call_output, apply_patch_call_output or function_call_output. */
export type OpenAIToolOutputItem =
  | { type: "shell_call_output"; call_id: string; output: OpenAIShellCommandOutput[]; max_output_length: number; caller?: OpenAIToolCaller }
  | { type: "local_shell_call_output"; id: string; output: string }
  | { type: "apply_patch_call_output"; call_id: string; status: "completed" | "failed"; output: string; caller?: OpenAIToolCaller }
  | { type: "function_call_output"; call_id: string; output: string; caller?: OpenAIToolCaller };

/** What runToolCalls returns. */
export interface OpenAIToolCallsResult {
  /** The answers, in call order: the next request's input (after the response's output, without previous_response_id). */
  input: OpenAIToolOutputItem[];
  /** The call_ids of function and custom tool calls the route left to the caller. */
  unhandled: string[];
}

/** How an executor runs calls. */
export interface OpenAIExecutorOptions {
  /** Runs commands and edits files as this user ("user" or "root"); default the sandbox's. */
  user?: "user" | "root";
  /** The commands' working directory and where relative patch paths start (default the user's home). */
  cwd?: string;
  /** Environment variables added to the commands'. */
  env?: Record<string, string>;
  /** A command's or program's timeout when its call sets none (default 60 000 ms, at most 600 000). */
  timeoutMs?: number;
  /** What the model gets of each output stream of a command, in bytes, when its call sets none (default 65 536, at most 1 MiB). */
  maxOutputLength?: number;
}

/** The whole request may take up to 30 minutes on the server. */
const routeTimeoutMs = 31 * 60_000;

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/**
 * Runs the client-executed tool calls of Responses API responses in one
 * sandbox. The work is done by the daemon (one implementation for every
 * SDK), with the client's key: its scopes, the sandbox's command policy
 * and the audit log apply. A missing sandbox, a key without the scopes
 * (exec; files for apply_patch; tools:call for airlock_run_program) and
 * a bad request reject with the typed errors; a failed command or patch
 * is an output the model sees.
 *
 * ```ts
 * const exec = new OpenAIExecutor(airlock, sandbox.id);
 * let response = await openai.responses.create({ model, input, tools: [...openaiTools] });
 * while (true) {
 *   const { input } = await exec.runToolCalls(response);
 *   if (input.length === 0) break;
 *   response = await openai.responses.create({ model, previous_response_id: response.id, input, tools: [...openaiTools] });
 * }
 * ```
 */
export class OpenAIExecutor {
  readonly #airlock: Airlock;
  readonly #sandboxId: string;
  readonly #o: OpenAIExecutorOptions;

  constructor(airlock: Airlock, sandboxId: string, opts: OpenAIExecutorOptions = {}) {
    if (!airlock || typeof airlock.whoami !== "function") throw invalid("OpenAIExecutor needs an Airlock client");
    if (typeof sandboxId !== "string" || sandboxId === "") throw invalid("OpenAIExecutor needs a sandbox id");
    if (opts.user !== undefined && opts.user !== "user" && opts.user !== "root") throw invalid(`user ${JSON.stringify(opts.user)} must be "user" or "root"`);
    if (opts.timeoutMs !== undefined && !(Number.isInteger(opts.timeoutMs) && opts.timeoutMs > 0 && opts.timeoutMs <= 600_000)) {
      throw invalid(`timeoutMs ${opts.timeoutMs} must be an integer between 1 and 600000`);
    }
    if (opts.maxOutputLength !== undefined && !(Number.isInteger(opts.maxOutputLength) && opts.maxOutputLength > 0 && opts.maxOutputLength <= 1 << 20)) {
      throw invalid(`maxOutputLength ${opts.maxOutputLength} must be an integer between 1 and 1048576`);
    }
    this.#airlock = airlock;
    this.#sandboxId = sandboxId;
    this.#o = { ...opts };
  }

  /** The tool definitions to send in the request's tools. */
  static readonly tools = openaiTools;

  /** The sandbox the calls run in. */
  get sandboxId(): string {
    return this.#sandboxId;
  }

  /**
   * Runs the tool calls of a response (or of its output items) that the
   * caller executes — shell_call, local_shell_call, apply_patch_call and
   * function_call of airlock_run_program — in order, and returns their
   * answers. Calls of hosted tools, calls answered already and other
   * functions are not run; the other functions' call_ids are in
   * unhandled.
   */
  async runToolCalls(response: OpenAIResponseLike | ReadonlyArray<OpenAIOutputItem>, opts?: CallOptions): Promise<OpenAIToolCallsResult> {
    const output = Array.isArray(response) ? response : isRecord(response) ? (response as OpenAIResponseLike).output : undefined;
    if (!Array.isArray(output)) throw invalid("runToolCalls needs a response (with output) or its output items");
    const body = {
      output,
      user: this.#o.user,
      cwd: this.#o.cwd,
      env: this.#o.env,
      timeout_ms: this.#o.timeoutMs,
      max_output_length: this.#o.maxOutputLength,
    };
    const w = await transportOf(this.#airlock).json<OpenAIToolCallsResult>({
      method: "POST",
      path: `/v1/sandboxes/${encodeURIComponent(this.#sandboxId)}/openai/tool-calls`,
      json: body,
      call: opts,
      defaultTimeoutMs: routeTimeoutMs,
    });
    return { input: w?.input ?? [], unhandled: w?.unhandled ?? [] };
  }
}

/** A shell action of @openai/agents (its Shell's run argument). */
export interface AgentsShellAction {
  commands: string[];
  timeoutMs?: number;
  maxOutputLength?: number;
}

/** A command's output as @openai/agents' Shell returns it. */
export type AgentsShellOutput = {
  stdout: string;
  stderr: string;
  outcome: { type: "exit"; exitCode: number | null } | { type: "timeout" };
};

/**
 * The Shell of @openai/agents' shellTool, running the commands in a
 * sandbox: `shellTool({ shell: new AirlockShell(airlock, id) })`. Each
 * command runs with bash -lc, in order; a timeout ends the action.
 */
export class AirlockShell {
  readonly #x: OpenAIExecutor;
  #n = 0;

  constructor(airlock: Airlock, sandboxId: string, opts: OpenAIExecutorOptions = {}) {
    this.#x = new OpenAIExecutor(airlock, sandboxId, opts);
  }

  async run(action: AgentsShellAction): Promise<{ output: AgentsShellOutput[]; maxOutputLength: number }> {
    if (!isRecord(action) || !Array.isArray(action.commands)) throw invalid("a shell action needs commands");
    const call = {
      type: "shell_call",
      call_id: `airlock_shell_${++this.#n}`,
      action: { commands: action.commands, timeout_ms: action.timeoutMs ?? null, max_output_length: action.maxOutputLength ?? null },
    };
    const { input } = await this.#x.runToolCalls([call]);
    const out = input[0];
    if (out?.type !== "shell_call_output") throw invalid("the server did not answer the shell call");
    return {
      output: out.output.map((o) => ({
        stdout: o.stdout,
        stderr: o.stderr,
        outcome: o.outcome.type === "timeout" ? { type: "timeout" } : { type: "exit", exitCode: o.outcome.exit_code },
      })),
      maxOutputLength: out.max_output_length,
    };
  }
}

/** An apply_patch operation of @openai/agents (its Editor's argument). */
export type AgentsPatchOperation =
  | { type: "create_file"; path: string; diff: string }
  | { type: "update_file"; path: string; diff: string }
  | { type: "delete_file"; path: string };

/** What an Editor returns to @openai/agents. */
export interface AgentsPatchResult {
  status: "completed" | "failed";
  output: string;
}

/**
 * The Editor of @openai/agents' applyPatchTool, editing the files of a
 * sandbox: `applyPatchTool({ editor: new AirlockEditor(airlock, id) })`.
 * The V4A diffs are applied by the daemon; a patch that does not apply
 * is a failed result the model sees.
 */
export class AirlockEditor {
  readonly #x: OpenAIExecutor;
  #n = 0;

  constructor(airlock: Airlock, sandboxId: string, opts: OpenAIExecutorOptions = {}) {
    this.#x = new OpenAIExecutor(airlock, sandboxId, opts);
  }

  createFile(operation: Extract<AgentsPatchOperation, { type: "create_file" }>): Promise<AgentsPatchResult> {
    return this.#apply(operation);
  }

  updateFile(operation: Extract<AgentsPatchOperation, { type: "update_file" }>): Promise<AgentsPatchResult> {
    return this.#apply(operation);
  }

  deleteFile(operation: Extract<AgentsPatchOperation, { type: "delete_file" }>): Promise<AgentsPatchResult> {
    return this.#apply(operation);
  }

  async #apply(operation: AgentsPatchOperation): Promise<AgentsPatchResult> {
    if (!isRecord(operation)) throw invalid("an apply_patch operation must be an object");
    const op = operation.type === "delete_file" ? { type: operation.type, path: operation.path } : operation;
    const { input } = await this.#x.runToolCalls([{ type: "apply_patch_call", call_id: `airlock_patch_${++this.#n}`, status: "completed", operation: op }]);
    const out = input[0];
    if (out?.type !== "apply_patch_call_output") throw invalid("the server did not answer the patch");
    return { status: out.status, output: out.output };
  }
}
