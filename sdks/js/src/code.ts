// Code execution in persistent contexts (Python, JavaScript, ...).
import type { Sandbox } from "./sandbox.js";
import { enc } from "./sandbox.js";
import { collect, executionEvents, type Execution, type Handlers } from "./stream.js";
import type { CallOptions, Transport } from "./transport.js";
import type { CodeContext, CodeRunRequest, Event, Language } from "./types.js";

/** Options of code.run. */
export interface CodeOptions extends CallOptions, Handlers {
  /** The language of the default context to run in (default `python`), when `context` is not given. */
  language?: Language;
  /** The context to run in: an id or a context from createContext. */
  context?: string | CodeContext;
  /** The server's limit on the execution in ms (default 10 minutes). */
  timeoutMs?: number;
}

function request(code: string, opts: CodeOptions): CodeRunRequest {
  const r: CodeRunRequest = { code };
  if (typeof opts.context === "string") r.context = { id: opts.context };
  else if (opts.context) r.context = { id: opts.context.id, language: opts.context.language };
  else r.context = { language: opts.language ?? "python" };
  if (opts.timeoutMs !== undefined) r.timeoutMs = opts.timeoutMs;
  return r;
}

/** A sandbox's code interpreter. */
export class Code {
  constructor(private readonly sb: Sandbox) {}

  /**
   * Runs code and resolves with its Execution (results in every MIME type,
   * logs, error with name/value/traceback, execution count). A failure of
   * the code is data (`execution.error`). Callbacks see events as they
   * arrive. Aborting `signal` interrupts the code on the server.
   */
  async run(code: string, opts: CodeOptions = {}): Promise<Execution> {
    return collect(this.stream(code, opts), opts);
  }

  /** Runs code and yields its events as they arrive; leaving early interrupts it. */
  async *stream(code: string, opts: CodeOptions = {}): AsyncGenerator<Event> {
    const t = await this.sb.execd(opts);
    yield* executionEvents(
      t,
      { method: "POST", path: "/code", json: request(code, opts), signal: opts.signal, requestTimeoutMs: opts.requestTimeoutMs },
      (id) => interruptCode(t, id),
    );
  }

  /** Creates a context: an interpreter whose state persists between runs. */
  async createContext(opts: CallOptions & { language?: Language; cwd?: string } = {}): Promise<CodeContext> {
    const body: Record<string, unknown> = { language: opts.language ?? "python" };
    if (opts.cwd !== undefined) body.cwd = opts.cwd;
    return (await this.sb.execd(opts)).json<CodeContext>({ method: "POST", path: "/code/context", json: body, signal: opts.signal, requestTimeoutMs: opts.requestTimeoutMs });
  }

  /** Lists contexts, of one language when given. */
  async listContexts(opts: CallOptions & { language?: Language } = {}): Promise<CodeContext[]> {
    const list = await (await this.sb.execd(opts)).json<CodeContext[] | null>({
      method: "GET",
      path: "/code/contexts",
      query: { language: opts.language },
      signal: opts.signal,
      requestTimeoutMs: opts.requestTimeoutMs,
    });
    return list ?? [];
  }

  /** Deletes a context (by id or the context itself). */
  async deleteContext(context: string | CodeContext, opts: CallOptions = {}): Promise<void> {
    const id = typeof context === "string" ? context : context.id;
    await (await this.sb.execd(opts)).call({ method: "DELETE", path: `/code/contexts/${enc(id)}`, ...opts });
  }

  /** Interrupts a running execution by its id (`execution.id`, or the `init` event's text). */
  async interrupt(executionId: string, opts: CallOptions = {}): Promise<void> {
    const t = await this.sb.execd(opts);
    await t.call({ method: "DELETE", path: "/code", query: { id: executionId }, ...opts });
  }
}

async function interruptCode(t: Transport, id: string): Promise<void> {
  await t.call({ method: "DELETE", path: "/code", query: { id }, requestTimeoutMs: 10_000 });
}
