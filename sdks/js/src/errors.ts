// Typed errors. Every error the SDK throws for a server's answer is a
// HyboxError; its subclass says what kind of answer it was.

/** The base class of every error of the SDK. */
export class HyboxError extends Error {
  /** The HTTP status of the answer (0 when there was none). */
  readonly status: number;
  /** The wire error code (`SANDBOX_NOT_FOUND`, `CONTEXT_BUSY`, ...), or "" without one. */
  readonly code: string;
  /** The answer's `X-Request-ID`, for the server's log. */
  readonly requestId: string;

  constructor(message: string, opts: { status?: number; code?: string; requestId?: string; cause?: unknown } = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = new.target.name;
    this.status = opts.status ?? 0;
    this.code = opts.code ?? "";
    this.requestId = opts.requestId ?? "";
  }

  /** Whether the same request may succeed if sent again unchanged (429, 502, 503, 504). */
  get isRetryable(): boolean {
    return this.status === 429 || this.status === 502 || this.status === 503 || this.status === 504;
  }
}

/** 404: no such sandbox, file, context, image or route. */
export class NotFoundError extends HyboxError {}
/** 409: the object's state refuses the request (busy context, paused sandbox, file exists, ...). */
export class ConflictError extends HyboxError {}
/** 401 or 403: no valid credential, or one that does not allow the route. */
export class AuthenticationError extends HyboxError {}
/** 400 (and 405, 413, 416, 426): the request is invalid; the message names the field. */
export class InvalidArgumentError extends HyboxError {}
/** 400 `NOT_SUPPORTED`: this sandbox's runtime or this server cannot do that. */
export class NotSupportedError extends InvalidArgumentError {}
/** 429: too many executions at once; `retryAfter` is the server's advice in seconds. */
export class RateLimitedError extends HyboxError {
  /** Seconds to wait before retrying (from `Retry-After`), or 0 when the server gave none. */
  readonly retryAfter: number;
  constructor(message: string, opts: { status?: number; code?: string; requestId?: string; retryAfter?: number } = {}) {
    super(message, opts);
    this.retryAfter = opts.retryAfter ?? 0;
  }
}
/** 504, or a call that ran out of its own `timeoutMs`. */
export class TimeoutError extends HyboxError {}
/** 502 or 503: the sandbox or a part of the server is not reachable now. */
export class UnavailableError extends HyboxError {}

/**
 * A command that exited non-zero, thrown only when the call asked for it
 * (`throwOnError: true`); otherwise the exit code is data.
 */
export class CommandExitError extends HyboxError {
  readonly exitCode: number;
  readonly stdout: string;
  readonly stderr: string;
  constructor(exitCode: number, stdout: string, stderr: string) {
    super(`command exited with code ${exitCode}`);
    this.exitCode = exitCode;
    this.stdout = stdout;
    this.stderr = stderr;
  }
}

/** Parses a Retry-After value (seconds or an HTTP date) into seconds. */
export function parseRetryAfter(v: string | null, now = Date.now()): number {
  if (!v) return 0;
  const s = v.trim();
  if (/^\d+(\.\d+)?$/.test(s)) return Number(s);
  const t = Date.parse(s);
  return Number.isNaN(t) ? 0 : Math.max(0, (t - now) / 1000);
}

/** Builds the typed error for a non-2xx answer from its status and body. */
export function errorFromAnswer(status: number, bodyText: string, headers: Headers): HyboxError {
  let code = "";
  let message = "";
  try {
    const body = JSON.parse(bodyText) as { code?: unknown; message?: unknown };
    if (typeof body.code === "string") code = body.code;
    if (typeof body.message === "string") message = body.message;
  } catch {
    message = bodyText.trim().slice(0, 200);
  }
  const requestId = headers.get("x-request-id") ?? "";
  const text = `hybox: ${status}${code ? " " + code : ""}${message ? ": " + message : ""}`;
  const opts = { status, code, requestId };
  if (status === 429) return new RateLimitedError(text, { ...opts, retryAfter: parseRetryAfter(headers.get("retry-after")) });
  if (code === "NOT_SUPPORTED") return new NotSupportedError(text, opts);
  switch (status) {
    case 400: case 405: case 413: case 416: case 426:
      return new InvalidArgumentError(text, opts);
    case 401: case 403:
      return new AuthenticationError(text, opts);
    case 404:
      return new NotFoundError(text, opts);
    case 409:
      return new ConflictError(text, opts);
    case 502: case 503:
      return new UnavailableError(text, opts);
    case 504:
      return new TimeoutError(text, opts);
  }
  return new HyboxError(text, opts);
}
