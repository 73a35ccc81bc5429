// Conversions between the API's wire forms (snake_case JSON, base64) and
// the SDK's types.

import { AirlockError, errorFor } from "./errors.js";
import type {
  Approval,
  CodeContext,
  CodeError,
  CodeExecution,
  CodeResult,
  CreatedKey,
  ExecResult,
  ExecStatus,
  FileInfo,
  Key,
  Limits,
  Network,
  Process,
  ProcessList,
  Sandbox,
  SandboxStats,
  ToolCallTrace,
  ToolRequest,
  WhoAmI,
} from "./types.js";

/** A JSON object as the server sends it. */
export type Wire = Record<string, any>;

const utf8 = new TextEncoder();

/** Decodes standard base64 (line breaks ignored). */
export function fromBase64(s: string): Uint8Array {
  const bin = atob(s.replace(/\s+/g, ""));
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

/** Encodes bytes as standard base64. */
export function toBase64(b: Uint8Array): string {
  let bin = "";
  for (let i = 0; i < b.length; i += 0x8000) {
    bin += String.fromCharCode(...b.subarray(i, i + 0x8000));
  }
  return btoa(bin);
}

/** Whether b is valid UTF-8. */
export function isUTF8(b: Uint8Array): boolean {
  try {
    new TextDecoder("utf-8", { fatal: true }).decode(b);
    return true;
  } catch {
    return false;
  }
}

/** Text or bytes as bytes. */
export function bytesOf(x: string | Uint8Array): Uint8Array {
  return typeof x === "string" ? utf8.encode(x) : x;
}

/** Puts data into body as the API's text field or, when it is not UTF-8, its _b64 twin. */
export function putData(body: Wire, field: string, data: string | Uint8Array | undefined): void {
  if (data === undefined) return;
  if (typeof data === "string") {
    body[field] = data;
  } else if (isUTF8(data)) {
    body[field] = new TextDecoder().decode(data);
  } else {
    body[`${field}_b64`] = toBase64(data);
  }
}

/** A text field or its _b64 twin as bytes. */
function pick(w: Wire, field: string): Uint8Array {
  if (typeof w[field] === "string") return utf8.encode(w[field]);
  if (typeof w[`${field}_b64`] === "string") return fromBase64(w[`${field}_b64`]);
  return new Uint8Array(0);
}

const date = (s: unknown): Date => new Date(String(s));
const optDate = (s: unknown): Date | undefined => (s ? new Date(String(s)) : undefined);

export function limitsToWire(l?: Limits): Wire | undefined {
  return l && { cpus: l.cpus, memory_mb: l.memoryMb, pids: l.pids, disk_mb: l.diskMb };
}

export function limitsFrom(w: Wire | undefined): Limits {
  return { cpus: w?.cpus, memoryMb: w?.memory_mb, pids: w?.pids, diskMb: w?.disk_mb };
}

export function networkToWire(n?: Network): Wire | undefined {
  if (!n) return undefined;
  return {
    mode: n.mode,
    allow: n.allow,
    credentials: n.credentials,
    limits: n.limits && {
      max_connections: n.limits.maxConnections,
      bandwidth_bytes_per_s: n.limits.bandwidthBytesPerS,
      idle_timeout_s: n.limits.idleTimeoutS,
    },
  };
}

export function sandboxFrom(w: Wire): Sandbox {
  return {
    id: w.id,
    state: w.state,
    template: w.template,
    limits: limitsFrom(w.limits),
    metadata: w.metadata ?? {},
    tools: w.tools ?? [],
    commandPolicy: w.command_policy ?? undefined,
    createdAt: date(w.created_at),
    expiresAt: date(w.expires_at),
    maxExpiresAt: date(w.max_expires_at),
    idleTimeoutS: w.idle_timeout_s || undefined,
    lastActivityAt: date(w.last_activity_at),
    stoppedAt: optDate(w.stopped_at),
    endReason: w.end_reason || undefined,
    error: w.error || undefined,
  };
}

export function execResultFrom(w: Wire): ExecResult {
  const stdoutBytes = pick(w, "stdout");
  const stderrBytes = pick(w, "stderr");
  const dec = new TextDecoder();
  return {
    status: w.status as ExecStatus,
    exitCode: w.exit_code ?? 0,
    signal: w.signal ?? 0,
    stdout: dec.decode(stdoutBytes),
    stderr: dec.decode(stderrBytes),
    stdoutBytes,
    stderrBytes,
    stdoutTruncated: !!w.stdout_truncated,
    stderrTruncated: !!w.stderr_truncated,
    durationMs: w.duration_ms ?? 0,
    cpuMs: w.cpu_ms ?? 0,
    peakMemoryBytes: w.peak_memory_bytes ?? 0,
    error: typeof w.error === "string" && w.error !== "" ? w.error : undefined,
  };
}

/** The output bytes of an output line (stdout, stderr). */
export function lineData(w: Wire): Uint8Array {
  return pick(w, "data");
}

/** The typed error of a stream's error line; fallback when it has no code. */
export function streamError(w: Wire, fallback: string): AirlockError {
  const e = w.error;
  if (e && typeof e === "object" && typeof e.code === "string" && e.code !== "") {
    return errorFor(200, e.code, String(e.message ?? e.code));
  }
  return errorFor(200, "internal", `airlock: ${fallback}`);
}

export function sandboxStatsFrom(w: Wire): SandboxStats {
  const n = w.network;
  return {
    sandboxId: w.sandbox_id,
    time: date(w.time),
    intervalMs: w.interval_ms ?? 0,
    cpu: { usageS: w.cpu?.usage_s ?? 0, rate: w.cpu?.rate ?? 0, limit: w.cpu?.limit ?? 0 },
    memory: {
      currentBytes: w.memory?.current_bytes ?? 0,
      peakBytes: w.memory?.peak_bytes ?? 0,
      limitBytes: w.memory?.limit_bytes ?? 0,
      oomKills: w.memory?.oom_kills ?? 0,
    },
    pids: { current: w.pids?.current ?? 0, limit: w.pids?.limit ?? 0 },
    disk: { usedBytes: w.disk?.used_bytes ?? 0, limitBytes: w.disk?.limit_bytes ?? 0 },
    network: n ? { source: n.source, rxBytes: n.rx_bytes ?? 0, txBytes: n.tx_bytes ?? 0 } : undefined,
    networkAbsent: w.network_absent || undefined,
  };
}

export function processFrom(w: Wire): Process {
  return {
    pid: w.pid,
    ppid: w.ppid,
    cmd: w.cmd ?? [],
    cmdTruncated: !!w.cmd_truncated,
    name: w.name,
    uid: w.uid,
    user: w.user || undefined,
    state: w.state,
    cgroup: w.cgroup || undefined,
    session: w.session,
    startedAt: date(w.started_at),
    startedByAgent: !!w.started_by_agent,
    tag: w.tag || undefined,
    background: !!w.background,
  };
}

export function processListFrom(w: Wire): ProcessList {
  return { processes: (w.processes ?? []).map(processFrom), total: w.total ?? 0, truncated: !!w.truncated };
}

export function fileInfoFrom(w: Wire): FileInfo {
  return {
    name: w.name,
    path: w.path,
    type: w.type,
    size: w.size,
    mode: w.mode,
    uid: w.uid,
    gid: w.gid,
    modTime: date(w.mod_time),
    symlinkTarget: w.symlink_target || undefined,
    sha256: w.sha256 || undefined,
  };
}

export function codeResultFrom(w: Wire): CodeResult {
  return {
    isMainResult: !!w.is_main_result,
    text: w.text,
    html: w.html,
    markdown: w.markdown,
    svg: w.svg,
    png: w.png ? fromBase64(w.png) : undefined,
    jpeg: w.jpeg ? fromBase64(w.jpeg) : undefined,
    latex: w.latex,
    json: w.json,
    javascript: w.javascript,
    omitted: w.omitted,
  };
}

/** A CodeExecution from a cell's end (the wire's CodeEnd) with its results and output. */
export function codeExecutionFrom(end: Wire, results: CodeResult[], stdout: string, stderr: string, error?: CodeError): CodeExecution {
  return {
    contextId: end.context_id,
    language: end.language,
    executionCount: end.execution_count ?? 0,
    status: end.status,
    exitCode: end.exit_code ?? 0,
    results,
    mainResult: results.find((r) => r.isMainResult),
    stdout,
    stderr,
    error,
    outputTruncated: !!end.output_truncated,
    resultsTruncated: !!end.results_truncated,
    durationMs: end.duration_ms ?? 0,
  };
}

export function codeContextFrom(w: Wire): CodeContext {
  return {
    id: w.id,
    language: w.language,
    cwd: w.cwd,
    default: !!w.default,
    state: w.state,
    error: w.error || undefined,
    executionCount: w.execution_count ?? 0,
    createdAt: date(w.created_at),
  };
}

export function whoAmIFrom(w: Wire): WhoAmI {
  return { tenantId: w.tenant_id, keyId: w.key_id, scopes: w.scopes ?? [] };
}

export function keyFrom(w: Wire): Key {
  return {
    id: w.id,
    name: w.name,
    scopes: w.scopes ?? [],
    createdAt: date(w.created_at),
    expiresAt: optDate(w.expires_at),
    lastUsedAt: optDate(w.last_used_at),
    revokedAt: optDate(w.revoked_at),
  };
}

export function createdKeyFrom(w: Wire): CreatedKey {
  if (typeof w.key !== "string" || w.key === "") {
    throw errorFor(500, "internal", "airlock: the server returned no key string");
  }
  return { ...keyFrom(w), secret: w.key };
}

export function toolCallTraceFrom(w: Wire): ToolCallTrace {
  return {
    tool: w.tool,
    args: w.args,
    outcome: w.outcome,
    stage: w.stage || undefined,
    reason: w.reason || undefined,
    dryRun: w.dry_run || undefined,
    start: date(w.start),
    durationMs: w.duration_ms ?? 0,
    httpStatus: w.http_status || undefined,
    outputBytes: w.output_bytes || undefined,
  };
}

export function toolRequestFrom(w: Wire): ToolRequest {
  return { id: w.id, tool: w.tool, args: w.args, createdAt: date(w.created_at), expiresAt: date(w.expires_at) };
}

export function approvalFrom(w: Wire): Approval {
  return {
    id: w.id,
    state: w.state,
    sandbox: w.sandbox,
    keyId: w.key_id,
    tool: w.tool,
    args: w.args,
    hash: w.hash,
    createdAt: date(w.created_at),
    expiresAt: date(w.expires_at),
    decidedAt: optDate(w.decided_at),
    approver: w.approver || undefined,
    reason: w.reason || undefined,
  };
}
