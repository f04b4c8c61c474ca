// HTTP transport: base URL and headers of one server or sandbox endpoint,
// typed errors, bounded retries, abort signals and request timeouts.
import { HyboxError, TimeoutError, UnavailableError, errorFromAnswer } from "./errors.js";

/** A WebSocket constructor as in browsers (and the `ws` package in Node). */
export type WebSocketLike = new (url: string, protocols?: string | string[] | Record<string, unknown>, options?: Record<string, unknown>) => WebSocket;

/** How to reach a hybox (or any OpenSandbox) server. */
export interface ConnectionOptions {
  /** Server address, `http://host:port` (or `host:port`). Node: `HYBOX_DOMAIN`, then `OPEN_SANDBOX_DOMAIN`. */
  domain?: string;
  /** API key. Node: `HYBOX_API_KEY`, then `OPEN_SANDBOX_API_KEY`. */
  apiKey?: string;
  /** How often an answer that may be retried is retried (default 3; 0: never). */
  maxRetries?: number;
  /** The longest wait between two tries in ms (default 10000). */
  maxRetryWaitMs?: number;
  /** A deadline for every request in ms (none by default); a streamed execution counts whole. */
  requestTimeoutMs?: number;
  /** Headers sent with every request to the server. */
  headers?: Record<string, string>;
  /** The fetch to use (default: the global fetch). */
  fetch?: typeof fetch;
  /** The WebSocket to use for terminals (default: the global WebSocket; `ws` in Node). */
  WebSocket?: WebSocketLike;
}

/** Options every call takes. */
export interface CallOptions {
  /** Aborting it stops the call; an execution in flight is interrupted on the server. */
  signal?: AbortSignal;
  /** A deadline for this call in ms (overrides the connection's `requestTimeoutMs`). */
  requestTimeoutMs?: number;
}

let defaults: () => ConnectionOptions = () => ({});

/** Used by the Node entry to supply the environment's connection. */
export function setConnectionDefaults(f: () => ConnectionOptions): void {
  defaults = f;
}

/** The resolved connection to one server. */
export class Connection {
  readonly baseUrl: string;
  readonly apiKey: string;
  readonly maxRetries: number;
  readonly maxRetryWaitMs: number;
  readonly requestTimeoutMs: number | undefined;
  readonly headers: Record<string, string>;
  readonly fetch: typeof fetch;
  readonly WebSocket: WebSocketLike | undefined;

  constructor(opts: ConnectionOptions = {}) {
    const d = defaults();
    const domain = opts.domain ?? d.domain ?? "http://127.0.0.1:8080";
    this.baseUrl = apiBase(domain);
    this.apiKey = opts.apiKey ?? d.apiKey ?? "";
    this.maxRetries = Math.max(0, opts.maxRetries ?? d.maxRetries ?? 3);
    this.maxRetryWaitMs = opts.maxRetryWaitMs ?? d.maxRetryWaitMs ?? 10_000;
    this.requestTimeoutMs = opts.requestTimeoutMs ?? d.requestTimeoutMs;
    this.headers = { ...d.headers, ...opts.headers };
    const f = opts.fetch ?? d.fetch ?? globalThis.fetch;
    if (typeof f !== "function") throw new HyboxError("hybox: no fetch in this environment: pass `fetch`");
    this.fetch = f.bind(globalThis);
    this.WebSocket = opts.WebSocket ?? d.WebSocket ?? (globalThis as { WebSocket?: WebSocketLike }).WebSocket;
  }

  /** The transport of the lifecycle API. */
  api(): Transport {
    const h: Record<string, string> = { ...this.headers };
    if (this.apiKey) h["OPEN-SANDBOX-API-KEY"] = this.apiKey;
    return new Transport(this, this.baseUrl, h);
  }

  /** The transport of a sandbox endpoint (`host[:port][/path]`, no scheme) with its headers. */
  endpoint(endpoint: string, headers: Record<string, string>): Transport {
    const scheme = this.baseUrl.startsWith("https:") ? "https://" : "http://";
    const url = /^https?:\/\//.test(endpoint) ? endpoint : scheme + endpoint;
    return new Transport(this, url.replace(/\/+$/, ""), { ...this.headers, ...headers });
  }
}

function apiBase(domain: string): string {
  let d = domain.trim().replace(/\/+$/, "");
  if (!/^https?:\/\//.test(d)) d = "http://" + d;
  return d.endsWith("/v1") ? d : d + "/v1";
}

/** One HTTP request. */
export interface Request extends CallOptions {
  method: string;
  path: string;
  query?: Record<string, string | number | boolean | string[] | undefined>;
  /** A JSON body. */
  json?: unknown;
  /** A raw body; streams are never retried. */
  body?: BodyInit;
  headers?: Record<string, string>;
  /** Keep the deadline running while the caller reads the body. */
  stream?: boolean;
}

const idempotent = new Set(["GET", "HEAD", "PUT", "DELETE", "OPTIONS"]);

/** Requests to one base URL with fixed headers. */
export class Transport {
  constructor(readonly conn: Connection, readonly baseUrl: string, readonly headers: Record<string, string>) {}

  url(path: string, query?: Request["query"]): string {
    let u = this.baseUrl + path;
    if (query) {
      const q = new URLSearchParams();
      for (const [k, v] of Object.entries(query)) {
        if (v === undefined) continue;
        if (Array.isArray(v)) for (const x of v) q.append(k, x);
        else q.append(k, String(v));
      }
      const s = q.toString();
      if (s) u += "?" + s;
    }
    return u;
  }

  /**
   * Sends r and returns the 2xx response; any other answer becomes a typed
   * HyboxError. Retryable answers are retried (429 always, 502/503/504 and
   * network failures for idempotent methods) with a bound.
   */
  async send(r: Request): Promise<Response> {
    const timeoutMs = r.requestTimeoutMs ?? this.conn.requestTimeoutMs;
    const timeout = timeoutMs !== undefined ? AbortSignal.timeout(timeoutMs) : undefined;
    const signal = anySignal(r.signal, timeout);
    const headers: Record<string, string> = { ...this.headers, ...r.headers };
    let body: BodyInit | undefined = r.body;
    if (r.json !== undefined) {
      body = JSON.stringify(r.json);
      headers["Content-Type"] = "application/json";
    }
    const replayable = !(typeof ReadableStream !== "undefined" && body instanceof ReadableStream);
    const url = this.url(r.path, r.query);
    for (let attempt = 0; ; attempt++) {
      let resp: Response;
      try {
        const init: RequestInit & { duplex?: string } = { method: r.method, headers, body, signal };
        if (!replayable) init.duplex = "half";
        resp = await this.conn.fetch(url, init);
      } catch (e) {
        throw this.failure(e, r, timeout);
      }
      if (resp.ok) {
        return resp;
      }
      const err = errorFromAnswer(resp.status, await resp.text().catch(() => ""), resp.headers);
      const may = replayable && (resp.status === 429 || (err.isRetryable && idempotent.has(r.method)));
      if (!may || attempt >= this.conn.maxRetries) throw err;
      const advised = "retryAfter" in err && typeof err.retryAfter === "number" ? err.retryAfter * 1000 : 0;
      const wait = Math.min(advised > 0 ? advised : 100 * 2 ** attempt, this.conn.maxRetryWaitMs);
      await sleep(wait, signal).catch((e: unknown) => {
        throw this.failure(e, r, timeout);
      });
    }
  }

  /** Sends r and decodes the JSON answer (undefined for an empty body). */
  async json<T>(r: Request): Promise<T> {
    const resp = await this.send(r);
    const text = await resp.text().catch((e: unknown) => {
      throw this.failure(e, r, undefined);
    });
    return (text ? JSON.parse(text) : undefined) as T;
  }

  /** Sends r and discards the answer. */
  async call(r: Request): Promise<void> {
    const resp = await this.send(r);
    await resp.body?.cancel().catch(() => undefined);
  }

  private failure(e: unknown, r: Request, timeout: AbortSignal | undefined): unknown {
    if (timeout?.aborted) return new TimeoutError(`hybox: ${r.method} ${r.path}: no answer within the request timeout`, { cause: e });
    if (r.signal?.aborted) return r.signal.reason ?? e;
    if (e instanceof HyboxError) return e;
    return new UnavailableError(`hybox: ${r.method} ${this.baseUrl}${r.path}: ${(e as Error)?.message ?? e}`, { cause: e });
  }
}

/** A signal that aborts when any of the given ones does (AbortSignal.any where it exists). */
export function anySignal(...given: Array<AbortSignal | undefined>): AbortSignal | undefined {
  const signals = given.filter((s): s is AbortSignal => s !== undefined);
  if (signals.length <= 1) return signals[0];
  const any = (AbortSignal as { any?: (s: AbortSignal[]) => AbortSignal }).any;
  if (any) return any.call(AbortSignal, signals);
  const c = new AbortController();
  for (const s of signals) {
    if (s.aborted) {
      c.abort(s.reason);
      break;
    }
    s.addEventListener("abort", () => c.abort(s.reason), { once: true });
  }
  return c.signal;
}

/** Waits ms, or rejects with the signal's reason when it aborts first. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal!.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
