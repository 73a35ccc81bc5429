// @airlock-sandbox/sdk: the TypeScript SDK of Airlock's REST API (v1).

export { Airlock } from "./airlock.js";
export type { AirlockOptions, FileData, FileOptions, RunOptions } from "./airlock.js";
export type { CallOptions } from "./http.js";
export { AnthropicExecutor, anthropicProgramTool, anthropicTools } from "./anthropic.js";
export type { AnthropicExecutorOptions, AnthropicMessageLike, AnthropicToolResultBlock, AnthropicToolUseBlock } from "./anthropic.js";
export { AirlockSandbox } from "./deepagents.js";
export type { AirlockSandboxOptions, BaseSandboxClass } from "./deepagents.js";
export { AirlockEditor, AirlockShell, OpenAIExecutor, openaiTools, runProgramToolName } from "./openai.js";
export type { AgentsPatchOperation, AgentsPatchResult, AgentsShellAction, AgentsShellOutput, OpenAIExecutorOptions, OpenAIOutputItem, OpenAIResponseLike, OpenAIShellCommandOutput, OpenAIToolCaller, OpenAIToolCallsResult, OpenAIToolOutputItem } from "./openai.js";
export {
  AirlockError,
  AlreadyExistsError,
  BadGatewayError,
  CanceledError,
  ConnectionError,
  FailedPreconditionError,
  InternalError,
  InvalidArgumentError,
  MethodNotAllowedError,
  NotFoundError,
  NotSupportedError,
  PermissionDeniedError,
  RateLimitedError,
  RequestTooLargeError,
  ResourceExhaustedError,
  ResponseTooLargeError,
  RetryableError,
  TimeoutError,
  UnauthenticatedError,
  UnavailableError,
  UnsupportedMediaTypeError,
  UpgradeRequiredError,
} from "./errors.js";
export type { ErrorCode } from "./errors.js";
export type * from "./types.js";
