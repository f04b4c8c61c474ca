// Execution streams: `text/event-stream` bodies whose events are JSON
// objects each followed by a blank line (optionally `data:`-prefixed).
import { HyboxError, TimeoutError, UnavailableError } from "./errors.js";
import type { Event, ExecError, MimeBundle } from "./types.js";
import { anySignal, type Request, type Transport } from "./transport.js";

/**
 * Parses the events of an execution stream body (`text/event-stream`: JSON
 * objects each followed by a blank line, optionally `data:`-prefixed) as they
 * arrive. The SDK uses it for every stream; it is exported for raw requests.
 */
export async function* parseEvents(body: ReadableStream<Uint8Array>): AsyncGenerator<Event> {
  const reader = body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let i: number;
      while ((i = boundary(buf)) >= 0) {
        const chunk = buf.slice(0, i);
        buf = buf.slice(i).replace(/^(\r?\n)+/, "");
        const ev = decodeEvent(chunk);
        if (ev) yield ev;
      }
    }
    const ev = decodeEvent(buf + dec.decode());
    if (ev) yield ev;
  } finally {
    await reader.cancel().catch(() => undefined);
  }
}

function boundary(s: string): number {
  const a = s.indexOf("\n\n");
  const b = s.indexOf("\r\n\r\n");
  if (a < 0) return b;
  if (b < 0) return a;
  return Math.min(a, b);
}

/** Decodes one event: a JSON object, its lines optionally prefixed with `data:`. */
export function decodeEvent(chunk: string): Event | undefined {
  const text = chunk
    .split(/\r?\n/)
    .map((l) => (l.startsWith("data:") ? l.slice(5).trimStart() : l))
    .filter((l) => !l.startsWith(":") && !/^(event|id|retry):/.test(l))
    .join("\n")
    .trim();
  if (!text) return undefined;
  try {
    return JSON.parse(text) as Event;
  } catch (e) {
    throw new HyboxError(`hybox: malformed stream event: ${text.slice(0, 100)}`, { cause: e });
  }
}

/** A result of code: the value of an expression or a `display(...)`, in every MIME type it has. */
export class Result {
  /** Every representation, by MIME type (`text/plain`, `text/html`, `image/png` (base64), ...). */
  readonly data: Readonly<Record<string, string>>;

  constructor(bundle: MimeBundle) {
    const data: Record<string, string> = {};
    for (const [k, v] of Object.entries(bundle)) {
      if (typeof v !== "string") continue;
      data[k === "text" ? "text/plain" : k] = v;
    }
    this.data = data;
  }

  /** The MIME types this result has. */
  formats(): string[] {
    return Object.keys(this.data);
  }
  /** text/plain. */
  get text(): string | undefined { return this.data["text/plain"]; }
  /** text/html. */
  get html(): string | undefined { return this.data["text/html"]; }
  /** text/markdown. */
  get markdown(): string | undefined { return this.data["text/markdown"]; }
  /** image/png, base64. */
  get png(): string | undefined { return this.data["image/png"]; }
  /** image/jpeg, base64. */
  get jpeg(): string | undefined { return this.data["image/jpeg"]; }
  /** image/svg+xml. */
  get svg(): string | undefined { return this.data["image/svg+xml"]; }
  /** application/json, parsed. */
  get json(): unknown {
    const j = this.data["application/json"];
    if (j === undefined) return undefined;
    try { return JSON.parse(j); } catch { return j; }
  }
  /** text/latex. */
  get latex(): string | undefined { return this.data["text/latex"]; }
  /** application/javascript. */
  get javascript(): string | undefined { return this.data["application/javascript"]; }
  toJSON(): Record<string, string> { return { ...this.data }; }
}

/** How an execution failed: the exception's name, value and traceback. */
export interface ExecutionError {
  name: string;
  value: string;
  traceback: string[];
}

export function executionError(e: ExecError): ExecutionError {
  return { name: e.ename, value: e.evalue, traceback: e.traceback ?? [] };
}

/** Callbacks for the events of an execution, called as they arrive. */
export interface Handlers {
  onStdout?: (text: string) => void;
  onStderr?: (text: string) => void;
  onResult?: (result: Result) => void;
  onError?: (error: ExecutionError) => void;
  /** Every event, as it arrives (including `init`, `ping`, ...). */
  onEvent?: (event: Event) => void;
}

/** What an execution did, accumulated from its events. */
export class Execution {
  /** The execution (or command) id, from the `init` event. */
  id = "";
  /** Results (expression values and displays), in order. */
  readonly results: Result[] = [];
  /** Output as it came: chunks for code, lines (without newline) for commands. */
  readonly logs: { stdout: string[]; stderr: string[] } = { stdout: [], stderr: [] };
  /** Set when the execution failed. */
  error: ExecutionError | undefined;
  /** The context's execution counter after this run (code). */
  executionCount = 0;
  /** The server's duration of the execution in ms. */
  executionTimeMs = 0;
  /** Whether `execution_complete` arrived. */
  complete = false;

  /** The text/plain of the last result that has one. */
  get text(): string | undefined {
    for (let i = this.results.length - 1; i >= 0; i--) {
      const t = this.results[i]!.text;
      if (t !== undefined) return t;
    }
    return undefined;
  }

  /** Applies one event; returns the Result it carried, if any. */
  add(ev: Event): Result | undefined {
    if (ev.execution_count && ev.execution_count > 0) this.executionCount = ev.execution_count;
    switch (ev.type) {
      case "init":
        this.id = ev.text ?? "";
        break;
      case "stdout":
        this.logs.stdout.push(ev.text ?? "");
        break;
      case "stderr":
        this.logs.stderr.push(ev.text ?? "");
        break;
      case "result":
        if (ev.results) {
          const r = new Result(ev.results);
          this.results.push(r);
          return r;
        }
        break;
      case "error":
        if (ev.error) this.error = executionError(ev.error);
        break;
      case "execution_complete":
        this.complete = true;
        this.executionTimeMs = ev.execution_time ?? 0;
        break;
    }
    return undefined;
  }

  /** Whether the execution reached its end (complete or failed). */
  get finished(): boolean {
    return this.complete || this.error !== undefined;
  }
}

export function dispatch(h: Handlers | undefined, ev: Event, r: Result | undefined): void {
  if (!h) return;
  h.onEvent?.(ev);
  switch (ev.type) {
    case "stdout": h.onStdout?.(ev.text ?? ""); break;
    case "stderr": h.onStderr?.(ev.text ?? ""); break;
    case "result": if (r) h.onResult?.(r); break;
    case "error": if (ev.error) h.onError?.(executionError(ev.error)); break;
  }
}

/**
 * Streams the events of an execution request. Aborting r.signal, or leaving
 * the iteration before the end, interrupts the execution on the server
 * (`interrupt` with the id of the `init` event).
 */
export async function* executionEvents(t: Transport, r: Request, interrupt: (id: string) => Promise<void>): AsyncGenerator<Event> {
  const timeoutMs = r.requestTimeoutMs ?? t.conn.requestTimeoutMs;
  const timeout = timeoutMs !== undefined ? AbortSignal.timeout(timeoutMs) : undefined;
  const signal = anySignal(r.signal, timeout);
  let id = "";
  let finished = false;
  let interrupted = false;
  const stop = () => {
    if (interrupted || finished || !id) return;
    interrupted = true;
    void interrupt(id).catch(() => undefined);
  };
  const failure = (e: unknown): unknown => {
    if (timeout?.aborted) return new TimeoutError(`hybox: ${r.path}: the execution did not end within ${timeoutMs} ms`, { cause: e });
    if (r.signal?.aborted) return r.signal.reason ?? e;
    if (e instanceof HyboxError) return e;
    return new UnavailableError(`hybox: stream cut: ${(e as Error)?.message ?? e}`, { cause: e });
  };
  let events: AsyncGenerator<Event> | undefined;
  signal?.addEventListener("abort", stop, { once: true });
  try {
    let resp: Response;
    try {
      resp = await t.send({ ...r, signal, requestTimeoutMs: undefined, stream: true, headers: { Accept: "text/event-stream", ...r.headers } });
    } catch (e) {
      throw failure(e);
    }
    if (!resp.body) throw new UnavailableError("hybox: empty stream");
    events = parseEvents(resp.body);
    for (;;) {
      let next: IteratorResult<Event>;
      try {
        next = await events.next();
      } catch (e) {
        throw failure(e);
      }
      if (next.done) break;
      const ev = next.value;
      if (ev.type === "init" && ev.text) {
        id = ev.text;
        if (signal?.aborted) stop();
      }
      if (ev.type === "execution_complete" || ev.type === "error") finished = true;
      yield ev;
    }
    if (!finished) throw new UnavailableError("hybox: the stream ended before the execution did");
  } finally {
    signal?.removeEventListener("abort", stop);
    stop();
    await events?.return(undefined).catch(() => undefined);
  }
}

/** Runs an execution to its end, calling h, and returns what it did. */
export async function collect(events: AsyncIterable<Event>, h: Handlers | undefined, x = new Execution()): Promise<Execution> {
  for await (const ev of events) {
    const r = x.add(ev);
    dispatch(h, ev, r);
  }
  return x;
}
