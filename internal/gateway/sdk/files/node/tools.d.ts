// Types of the tools module (tools.js, tools.mjs). The functions of the
// tools granted to a sandbox are typed by the declarations tools.dts()
// generates from their schemas.

export interface ToolInfo {
  name: string;
  description?: string;
  input_schema: Record<string, unknown>;
  output_schema?: Record<string, unknown>;
}

export interface CallOptions {
  /** Milliseconds the call may take (default 300 s, or AIRLOCK_TOOLS_TIMEOUT seconds). */
  timeoutMs?: number;
}

/** A call the gateway refused or that failed. */
export declare class ToolError extends Error {
  /** The gateway's error code: permission_denied, invalid_argument, resource_exhausted, unavailable, timeout, ... */
  code: string;
  /** The gateway's message, without the code. */
  detail: string;
  constructor(code: string, message: string);
}

export declare function call(name: string, args?: Record<string, unknown>, options?: CallOptions): Promise<unknown>;
export declare function listTools(): Promise<ToolInfo[]>;
export declare function load(): Promise<ToolsModule & Record<string, (args?: Record<string, unknown>, options?: CallOptions) => Promise<unknown>>>;
export declare function get(name: string): (args?: Record<string, unknown>, options?: CallOptions) => Promise<unknown>;
export declare function dts(toolList?: ToolInfo[]): Promise<string>;
export declare const DEFAULT_URL: string;
export declare const DEFAULT_TIMEOUT_MS: number;
export declare const MAX_RESPONSE_BYTES: number;

export interface ToolsModule {
  call: typeof call;
  listTools: typeof listTools;
  load: typeof load;
  get: typeof get;
  dts: typeof dts;
  ToolError: typeof ToolError;
  DEFAULT_URL: string;
  DEFAULT_TIMEOUT_MS: number;
  MAX_RESPONSE_BYTES: number;
}
