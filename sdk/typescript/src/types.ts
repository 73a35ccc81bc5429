// The SDK's types: the API's objects in camelCase, and the wire forms
// (snake_case, as the server sends them) that they are converted from.

/** A sandbox's lifecycle state. */
export type SandboxState = "creating" | "adopting" | "running" | "paused" | "stopping" | "stopped" | "failed";

/** A sandbox's resource caps; unset fields take the template's, then the server's defaults. */
export interface Limits {
  cpus?: number;
  memoryMb?: number;
  pids?: number;
  diskMb?: number;
}

/** A credential the egress proxy adds to requests to host. */
export interface NetworkCredential {
  host: string;
  port?: number;
  header: string;
  /** The name of a secret (/v1/secrets). */
  secret: string;
  format?: string;
}

/** A sandbox's network policy; mode "none" (the default) is loopback only. */
export interface Network {
  mode: string;
  allow?: string[];
  credentials?: NetworkCredential[];
  limits?: { maxConnections?: number; bandwidthBytesPerS?: number; idleTimeoutS?: number };
}

/** An allow/ask/deny policy over the commands exec runs. */
export interface CommandPolicy {
  rules?: { action: string; prefix: string[] }[];
  default?: string;
}

/** What to create: every field is optional. */
export interface CreateSandboxRequest {
  /** The root filesystem ("host" by default). */
  template?: string;
  /** How long the sandbox lives, in seconds. */
  timeoutS?: number;
  /** Destroys the sandbox after this long without activity, in seconds. */
  idleTimeoutS?: number;
  limits?: Limits;
  network?: Network;
  /** Added to every command's environment. */
  env?: Record<string, string>;
  /** Labels, returned with the sandbox and usable as list filters. */
  metadata?: Record<string, string>;
  /** Tools and toolsets of the tenant granted to the sandbox. */
  tools?: string[];
  toolsets?: string[];
  commandPolicy?: CommandPolicy;
}

/** A sandbox. */
export interface Sandbox {
  id: string;
  state: SandboxState;
  template: string;
  limits: Limits;
  metadata: Record<string, string>;
  tools: string[];
  commandPolicy?: CommandPolicy;
  createdAt: Date;
  expiresAt: Date;
  /** The latest expiry setTimeout can reach. */
  maxExpiresAt: Date;
  idleTimeoutS?: number;
  lastActivityAt: Date;
  /** When the sandbox ended; unset while it lives. */
  stoppedAt?: Date;
  /** Why it ended or is ending (deleted, expired, idle, ...). */
  endReason?: string;
  /** Why a failed sandbox failed. */
  error?: string;
}

/** A command to run: exactly one of cmd and command. */
export interface ExecRequest {
  /** The argument list; cmd[0] is looked up in PATH. */
  cmd?: string[];
  /** A shell command line, run with /bin/sh -c. */
  command?: string;
  /** The working directory (relative to the user's home). */
  cwd?: string;
  env?: Record<string, string>;
  /** "user" (the default) or "root". */
  user?: string;
  /** The command's standard input. */
  stdin?: string | Uint8Array;
  /** Kills the command after this many seconds (server default 60). */
  timeoutS?: number;
  /** Keeps the process running when a streamed exec's caller goes away. */
  background?: boolean;
  /** Names the process in the process list. */
  tag?: string;
  /** Keeps stdin open for processes.sendStdin (streamed exec only). */
  keepStdin?: boolean;
  /** Runs the process on a terminal of this size (streamed exec only). */
  pty?: { cols: number; rows: number };
}

/** How a command ended: success, error, timeout, resource_exceeded or killed. */
export type ExecStatus = "success" | "error" | "timeout" | "resource_exceeded" | "killed";

/** How a command ended, with its output for a buffered exec. */
export interface ExecResult {
  status: ExecStatus;
  /** The exit code; -1 when a signal killed it. */
  exitCode: number;
  /** The signal that killed it, 0 if it exited. */
  signal: number;
  /** The output as text (bytes that are not UTF-8 are replaced). */
  stdout: string;
  stderr: string;
  /** The output as bytes. */
  stdoutBytes: Uint8Array;
  stderrBytes: Uint8Array;
  stdoutTruncated: boolean;
  stderrTruncated: boolean;
  durationMs: number;
  cpuMs: number;
  peakMemoryBytes: number;
  /** Why the command could not be started, if it could not. */
  error?: string;
}

/** An event of a streamed exec or a followed process. */
export type ExecEvent =
  | { type: "start"; pid: number }
  | { type: "stdout" | "stderr"; data: Uint8Array; text: string }
  | { type: "exit"; result: ExecResult };

/** A sandbox's CPU use: every process's, its agent's included. */
export interface StatsCPU {
  /** CPU time used since the sandbox started, in seconds. */
  usageS: number;
  /** CPUs used over the sample's interval (0.5: half of one CPU's time). */
  rate: number;
  /** The CPU cap, in CPUs. */
  limit: number;
}

/** A sandbox's memory: its processes', its agent's and the files of its writable layer (in memory). */
export interface StatsMemory {
  currentBytes: number;
  /** The most used so far. */
  peakBytes: number;
  /** The cap on that whole: the memory limit plus the agent's allowance (0: none). */
  limitBytes: number;
  /** Processes the kernel's OOM killer ended. */
  oomKills: number;
}

/** A sandbox's tasks (processes and threads), its agent's included. */
export interface StatsPids {
  current: number;
  /** The pids limit plus the agent's allowance (0: none). */
  limit: number;
}

/** A sandbox's writable layer. */
export interface StatsDisk {
  usedBytes: number;
  /** Its size: the disk limit. */
  limitBytes: number;
}

/** A sandbox's traffic since its network started. */
export interface StatsNetwork {
  /** "interface": its own interface's counters (mode open); "proxy": its egress proxy's (mode allowlist). */
  source: "interface" | "proxy" | string;
  /** Bytes into the sandbox. */
  rxBytes: number;
  /** Bytes out of it. */
  txBytes: number;
}

/** One sample of a sandbox's resource use and caps (sandboxes.stats, sandboxes.streamStats). */
export interface SandboxStats {
  sandboxId: string;
  /** When the sample was read. */
  time: Date;
  /** The window cpu.rate was measured over, in milliseconds. */
  intervalMs: number;
  cpu: StatsCPU;
  memory: StatsMemory;
  pids: StatsPids;
  disk: StatsDisk;
  /** The sandbox's traffic; unset when it has no way out (networkAbsent says why). */
  network?: StatsNetwork;
  /** Why network is unset. */
  networkAbsent?: string;
}

/** A process of a sandbox. */
export interface Process {
  pid: number;
  ppid: number;
  cmd: string[];
  cmdTruncated: boolean;
  name: string;
  uid: number;
  user?: string;
  state: string;
  cgroup?: string;
  session: number;
  startedAt: Date;
  /** Started by the sandbox's agent (an exec, a code context): followable. */
  startedByAgent: boolean;
  tag?: string;
  background: boolean;
}

/** The process list of a sandbox. */
export interface ProcessList {
  processes: Process[];
  total: number;
  truncated: boolean;
}

/** A file or directory in a sandbox. */
export interface FileInfo {
  name: string;
  /** The absolute path inside the sandbox. */
  path: string;
  type: "file" | "dir" | "symlink" | "other";
  size: number;
  /** The permission bits with setuid, setgid and sticky. */
  mode: number;
  uid: number;
  gid: number;
  modTime: Date;
  symlinkTarget?: string;
  /** The hex SHA-256 of the bytes the server received (files.write only). */
  sha256?: string;
}

/** An event of a watch: the watch is in place, or a change. */
export type WatchEvent =
  | { type: "start" }
  | { type: "event"; path: string; op: "create" | "write" | "remove" | "rename" | "chmod" };

/** A cell to run: language, or the contextId of a context. */
export interface RunCodeRequest {
  /** python, javascript or bash; required without contextId. */
  language?: "python" | "javascript" | "bash" | string;
  code: string;
  /** A context; without it, the default context of language. */
  contextId?: string;
  env?: Record<string, string>;
  /** Interrupts the cell after this many seconds (server default 300). */
  timeoutS?: number;
}

/** A value a cell showed, in one or more representations. */
export interface CodeResult {
  isMainResult: boolean;
  text?: string;
  html?: string;
  markdown?: string;
  svg?: string;
  /** The image bytes (base64 on the wire). */
  png?: Uint8Array;
  jpeg?: Uint8Array;
  latex?: string;
  /** The JSON representation, parsed. */
  json?: unknown;
  javascript?: string;
  /** What the server left out for a size limit. */
  omitted?: string;
}

/** The error a cell raised. */
export interface CodeError {
  name: string;
  value: string;
  traceback: string;
}

/** How a cell ran: ok, error, timeout, interrupted or died. */
export interface CodeExecution {
  contextId: string;
  language: string;
  executionCount: number;
  status: "ok" | "error" | "timeout" | "interrupted" | "died" | string;
  exitCode: number;
  results: CodeResult[];
  /** The value of the cell's last expression, if any. */
  mainResult?: CodeResult;
  stdout: string;
  stderr: string;
  error?: CodeError;
  outputTruncated: boolean;
  resultsTruncated: boolean;
  durationMs: number;
}

/** An event of a streamed cell. */
export type CodeEvent =
  | { type: "stdout" | "stderr"; data: string }
  | { type: "result"; result: CodeResult }
  | { type: "error"; error: CodeError }
  | { type: "end"; execution: CodeExecution };

/** A stateful code context. */
export interface CodeContext {
  id: string;
  language: string;
  cwd: string;
  default: boolean;
  /** idle, busy or dead. */
  state: string;
  error?: string;
  executionCount: number;
  createdAt: Date;
}

/** The calling key. */
export interface WhoAmI {
  tenantId: string;
  keyId: string;
  scopes: string[];
}

/** An API key, without its secret. */
export interface Key {
  id: string;
  name: string;
  scopes: string[];
  createdAt: Date;
  expiresAt?: Date;
  lastUsedAt?: Date;
  revokedAt?: Date;
}

/** A new key with its secret, shown once. */
export interface CreatedKey extends Key {
  secret: string;
}

/** A tool call a program made, as the gateway decided and recorded it. */
export interface ToolCallTrace {
  tool: string;
  args?: unknown;
  outcome: string;
  stage?: string;
  reason?: string;
  dryRun?: boolean;
  start: Date;
  durationMs: number;
  httpStatus?: number;
  outputBytes?: number;
}

/** A call of a caller-executed tool waiting for its answer. */
export interface ToolRequest {
  id: string;
  tool: string;
  args: unknown;
  createdAt: Date;
  expiresAt: Date;
}

/** A program to run with the tools of its sandbox. */
export interface RunRequest {
  language: "python" | "javascript" | "bash" | string;
  /** The program (at most 100 KiB). */
  code: string;
  timeoutS?: number;
  env?: Record<string, string>;
  /** runOnce only: the sandbox created for the run. */
  template?: string;
  network?: Network;
  limits?: Limits;
  tools?: string[];
  toolsets?: string[];
}

/** How a program ended, its output and its tool calls. */
export interface RunResult extends ExecResult {
  /** The sandbox it ran in (for runOnce, gone by now). */
  sandboxId: string;
  toolCalls: ToolCallTrace[];
  toolCallsDropped: number;
}

/** A caller-executed tool: its arguments in, its result (any JSON value) out; a throw is the tool's failure. */
export type ToolFunction = (args: any, ctx: { signal: AbortSignal; callId: string; sandboxId: string }) => unknown | Promise<unknown>;

/** An approval: a tool call that waits for (or got) a person's decision. */
export interface Approval {
  id: string;
  state: "pending" | "approved" | "denied" | "expired" | "canceled" | string;
  sandbox: string;
  keyId: string;
  tool: string;
  args: unknown;
  hash: string;
  createdAt: Date;
  expiresAt: Date;
  decidedAt?: Date;
  approver?: string;
  reason?: string;
}

/**
 * A template, a tool and a toolset are returned as the API sends them
 * (snake_case, see api/openapi.yaml): their schemas and configurations
 * are JSON documents of their own.
 */
export interface Template {
  name: string;
  shared: boolean;
  source: string;
  builtin: boolean;
  layers: number;
  size: number;
  shared_bytes: number;
  created?: string | null;
}

/** A template with its layers and configuration (the API's form). */
export interface TemplateDetail extends Template {
  layer_list: { digest: string; size: number; files: number; shared: boolean }[];
  config: Record<string, unknown>;
}

/** The templates and the store's disk use (the API's form). */
export interface TemplateList {
  templates: Template[];
  usage: Record<string, number>;
}

/** A registered tool (the API's form). */
export interface Tool {
  name: string;
  description?: string;
  input_schema?: unknown;
  output_schema?: unknown;
  [field: string]: unknown;
}

/** A named group of tools (the API's form). */
export interface Toolset {
  name: string;
  tools: string[];
  [field: string]: unknown;
}
