// @hybox/sdk: the TypeScript client of hybox, a sandbox runtime for AI agents
// that speaks the OpenSandbox protocol. This core has no Node-only import and
// runs in browsers; the Node entry (node.ts) adds the environment's
// connection and the `ws` WebSocket.
export { Sandbox, EXECD_PORT, EGRESS_PORT } from "./sandbox.js";
export type { SandboxCreateOptions, SandboxListOptions, SandboxEndpoint } from "./sandbox.js";
export { Commands, CommandHandle, Session } from "./commands.js";
export type { CommandOptions, CommandResult } from "./commands.js";
export { Code } from "./code.js";
export type { CodeOptions } from "./code.js";
export { Files } from "./files.js";
export type { FileData, WriteEntry } from "./files.js";
export { Egress, Vault } from "./egress.js";
export { Pty } from "./pty.js";
export { Pool, Volume } from "./pools.js";
export type { PoolCreateOptions } from "./pools.js";
export type { PtyOptions } from "./pty.js";
export { run } from "./run.js";
export type { RunOptions } from "./run.js";
export { Execution, Result, parseEvents } from "./stream.js";
export type { ExecutionError, Handlers } from "./stream.js";
export {
  HyboxError,
  NotFoundError,
  ConflictError,
  AuthenticationError,
  InvalidArgumentError,
  NotSupportedError,
  RateLimitedError,
  TimeoutError,
  UnavailableError,
  CommandExitError,
} from "./errors.js";
export type { ConnectionOptions, CallOptions, WebSocketLike } from "./transport.js";
export type * from "./types.js";
export type { components, paths, operations } from "./schema.gen.js";
