// Compiled (not run) by deepagents.test.mjs: AirlockSandbox, whose
// protocol shapes the SDK declares itself, checked against deepagents'
// own declarations.

import { BaseSandbox, CompositeBackend, StateBackend, createDeepAgent } from "deepagents";
import type { BackendProtocolV2, ExecuteResponse, FileDownloadResponse, SandboxBackendProtocolV2 } from "deepagents";
import type { BaseChatModel } from "@langchain/core/language_models/chat_models";

import { Airlock, AirlockSandbox } from "../dist/index.js";
import type { BaseSandboxClass } from "../dist/index.js";

declare const airlock: Airlock;
declare const model: BaseChatModel;

const Base: BaseSandboxClass = BaseSandbox;
const backend = new AirlockSandbox(airlock, "sb-aaaaaaaaaaaaaaaa", { BaseSandbox: Base });
export const asProtocol: SandboxBackendProtocolV2 = backend;
export const asFiles: BackendProtocolV2 = backend;
export const executed: Promise<ExecuteResponse> = backend.execute("true", { timeout: 5 });
export const downloaded: Promise<FileDownloadResponse[]> = backend.downloadFiles(["/etc/hostname"]);
export const agent = createDeepAgent({ model, backend });
export const routed = createDeepAgent({ model, backend: new CompositeBackend(backend, { "/large_tool_results/": new StateBackend() }) });
