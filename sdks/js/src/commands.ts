// Shell commands: foreground runs with streamed output, background commands,
// persistent sessions and terminals.
import { CommandExitError } from "./errors.js";
import { Pty, type PtyOptions } from "./pty.js";
import type { Sandbox } from "./sandbox.js";
import { enc } from "./sandbox.js";
import { collect, executionEvents, Execution, type ExecutionError, type Handlers } from "./stream.js";
import { sleep, type CallOptions, type Transport } from "./transport.js";
import type { CommandRequest, CommandStatus, Event, SessionCreated } from "./types.js";

/** Options of commands.run. */
export interface CommandOptions extends CallOptions, Pick<Handlers, "onStdout" | "onStderr" | "onEvent"> {
  cwd?: string;
  envs?: Record<string, string>;
  /** The server's limit on the command in ms (default 10 minutes). */
  timeoutMs?: number;
  /** Container sandboxes only. */
  uid?: number;
  gid?: number;
  /** Throw a CommandExitError when the command exits non-zero (by default the exit code is data). */
  throwOnError?: boolean;
}

/** What a foreground command did. */
export interface CommandResult {
  /** The command id. */
  id: string;
  /** Its standard output (each line followed by "\n"). */
  stdout: string;
  /** Its standard error. */
  stderr: string;
  /** 0 when it succeeded, its code when it exited non-zero (137 when killed), -1 when it ended without one. */
  exitCode: number;
  /** How it failed, when it did (`CommandExecError`, `TimeoutError`, ...). */
  error: ExecutionError | undefined;
}

function request(cmd: string, opts: CommandOptions, background: boolean): CommandRequest {
  const r: CommandRequest = { command: cmd };
  if (background) r.background = true;
  if (opts.cwd !== undefined) r.cwd = opts.cwd;
  if (opts.envs !== undefined) r.envs = opts.envs;
  if (opts.timeoutMs !== undefined) r.timeout = opts.timeoutMs;
  if (opts.uid !== undefined) r.uid = opts.uid;
  if (opts.gid !== undefined) r.gid = opts.gid;
  return r;
}

function lines(l: string[]): string {
  return l.map((s) => s + "\n").join("");
}

/** Turns a command's execution into its result. */
export function commandResult(x: Execution, throwOnError = false): CommandResult {
  let exitCode = -1;
  if (x.complete) exitCode = 0;
  else if (x.error?.name === "CommandExecError") {
    const n = Number.parseInt(x.error.value, 10);
    if (!Number.isNaN(n)) exitCode = n;
  }
  const res = { id: x.id, stdout: lines(x.logs.stdout), stderr: lines(x.logs.stderr), exitCode, error: x.error };
  if (throwOnError && exitCode !== 0) throw new CommandExitError(exitCode, res.stdout, res.stderr);
  return res;
}

/** A sandbox's shell commands. */
export class Commands {
  constructor(private readonly sb: Sandbox) {}

  /**
   * Runs a shell command. In the foreground (the default) it resolves when
   * the command ends, its output streamed to onStdout/onStderr line by line;
   * a non-zero exit is data (`exitCode`) unless `throwOnError` is set. With
   * `background: true` it resolves at once with a handle.
   * Aborting `signal` kills the command on the server.
   */
  run(cmd: string, opts: CommandOptions & { background: true }): Promise<CommandHandle>;
  run(cmd: string, opts?: CommandOptions & { background?: false }): Promise<CommandResult>;
  async run(cmd: string, opts: CommandOptions & { background?: boolean } = {}): Promise<CommandResult | CommandHandle> {
    if (opts.background) {
      const x = await collect(this.events(cmd, opts, true), undefined);
      return new CommandHandle(this.sb, x.id);
    }
    const x = await collect(this.events(cmd, opts, false), opts);
    return commandResult(x, opts.throwOnError);
  }

  /**
   * Runs a command in the foreground and yields its events as they arrive
   * (init, stdout/stderr lines, then execution_complete or error). Leaving
   * the loop early or aborting `signal` kills the command.
   */
  stream(cmd: string, opts: CommandOptions = {}): AsyncGenerator<Event> {
    return this.events(cmd, opts, false);
  }

  private async *events(cmd: string, opts: CommandOptions, background: boolean): AsyncGenerator<Event> {
    const t = await this.sb.execd(opts);
    yield* executionEvents(
      t,
      { method: "POST", path: "/command", json: request(cmd, opts, background), signal: opts.signal, requestTimeoutMs: opts.requestTimeoutMs },
      (id) => interruptCommand(t, id),
    );
  }

  /** A handle of a command started earlier (in the background) by its id. */
  connect(id: string): CommandHandle {
    return new CommandHandle(this.sb, id);
  }

  /** Kills a running command by id. */
  async kill(id: string, opts: CallOptions = {}): Promise<void> {
    await (await this.sb.execd(opts)).call({ method: "DELETE", path: "/command", query: { id }, ...opts });
  }

  /** Starts a persistent shell session that keeps its cwd and environment between runs. */
  async createSession(opts: CallOptions & { cwd?: string; envs?: Record<string, string> } = {}): Promise<Session> {
    const t = await this.sb.execd(opts);
    const body: Record<string, unknown> = {};
    if (opts.cwd !== undefined) body.cwd = opts.cwd;
    if (opts.envs !== undefined) body.envs = opts.envs;
    const s = await t.json<SessionCreated>({ method: "POST", path: "/session", json: body, signal: opts.signal, requestTimeoutMs: opts.requestTimeoutMs });
    return new Session(this.sb, s.session_id);
  }

  /** Opens a terminal (container sandboxes): a program on a PTY, over a WebSocket. */
  async createPty(opts: PtyOptions = {}): Promise<Pty> {
    return Pty.open(this.sb, opts);
  }
}

async function interruptCommand(t: Transport, id: string): Promise<void> {
  await t.call({ method: "DELETE", path: "/command", query: { id }, requestTimeoutMs: 10_000 });
}

/** A command running in the background. */
export class CommandHandle {
  constructor(private readonly sb: Sandbox, readonly id: string) {}

  /** The command's state; `exit_code` is set once it ended. */
  async status(opts: CallOptions = {}): Promise<CommandStatus> {
    return (await this.sb.execd(opts)).json<CommandStatus>({ method: "GET", path: `/command/status/${enc(this.id)}`, ...opts });
  }

  /** Output (stdout and stderr interleaved) from byte `cursor`, and the cursor to pass next. */
  async logs(cursor = 0, opts: CallOptions = {}): Promise<{ text: string; cursor: number }> {
    const resp = await (await this.sb.execd(opts)).send({ method: "GET", path: `/command/${enc(this.id)}/logs`, query: { cursor }, ...opts });
    const text = await resp.text();
    const next = Number(resp.headers.get("EXECD-COMMANDS-TAIL-CURSOR") ?? cursor + new TextEncoder().encode(text).length);
    return { text, cursor: next };
  }

  /** Waits until the command ends (polling its status) and returns its final status. */
  async wait(opts: CallOptions & { intervalMs?: number } = {}): Promise<CommandStatus> {
    let interval = 5;
    for (;;) {
      const st = await this.status(opts);
      if (!st.running) return st;
      await sleep(interval, opts.signal);
      interval = Math.min(interval * 2, opts.intervalMs ?? 200);
    }
  }

  /** Kills the command. */
  async kill(opts: CallOptions = {}): Promise<void> {
    await (await this.sb.execd(opts)).call({ method: "DELETE", path: "/command", query: { id: this.id }, ...opts });
  }
}

/** A persistent shell: each run sees the cwd and environment the previous ones left. */
export class Session {
  constructor(private readonly sb: Sandbox, readonly id: string) {}

  /** Runs a command in the session (one at a time); like commands.run in the foreground. */
  async run(cmd: string, opts: CallOptions & Pick<Handlers, "onStdout" | "onStderr" | "onEvent"> & { timeoutMs?: number; throwOnError?: boolean } = {}): Promise<CommandResult> {
    const t = await this.sb.execd(opts);
    const body: Record<string, unknown> = { command: cmd };
    if (opts.timeoutMs !== undefined) body.timeout = opts.timeoutMs;
    const ev = executionEvents(
      t,
      { method: "POST", path: `/session/${enc(this.id)}/run`, json: body, signal: opts.signal, requestTimeoutMs: opts.requestTimeoutMs },
      (id) => interruptCommand(t, id),
    );
    return commandResult(await collect(ev, opts), opts.throwOnError);
  }

  /** Ends the session. */
  async close(opts: CallOptions = {}): Promise<void> {
    await (await this.sb.execd(opts)).call({ method: "DELETE", path: `/session/${enc(this.id)}`, ...opts });
  }
}
