// The one-shot run: code in a throw-away sandbox, no lifecycle.
import { split } from "./sandbox.js";
import { collect, parseEvents, type Execution, type Handlers } from "./stream.js";
import { UnavailableError } from "./errors.js";
import type { CallOptions, ConnectionOptions } from "./transport.js";
import type { Language, NetworkPolicy, RunRequest } from "./types.js";

/** Options of run. */
export interface RunOptions extends ConnectionOptions, CallOptions, Handlers {
  /** The language (default `python`). */
  language?: Language;
  /** The server's limit in ms (default 10 minutes). */
  timeoutMs?: number;
  /** Without it the code has no network; with it, its HTTP(S) requests obey this policy. */
  networkPolicy?: NetworkPolicy;
}

/**
 * Runs code once in a throw-away wasm sandbox and resolves with its
 * Execution. Aborting `signal` closes the stream, which ends the run.
 */
export async function run(code: string, opts: RunOptions = {}): Promise<Execution> {
  const { conn, call, rest } = split(opts);
  const r = rest as RunOptions;
  const body: RunRequest = { language: r.language ?? "python", code };
  if (r.timeoutMs !== undefined) body.timeoutMs = r.timeoutMs;
  if (r.networkPolicy !== undefined) body.networkPolicy = r.networkPolicy;
  const resp = await conn.api().send({ method: "POST", path: "/run", json: body, headers: { Accept: "text/event-stream" }, stream: true, ...call });
  if (!resp.body) throw new UnavailableError("hybox: empty stream");
  try {
    return await collect(parseEvents(resp.body), opts);
  } catch (e) {
    if (call.signal?.aborted) throw call.signal.reason ?? e;
    throw e;
  }
}
