// Terminals: a program on a PTY in the sandbox, attached over a WebSocket.
import { HyboxError, UnavailableError } from "./errors.js";
import type { Sandbox } from "./sandbox.js";
import { enc } from "./sandbox.js";
import type { CallOptions, WebSocketLike } from "./transport.js";
import type { PtyCreated, PtyServerMessage } from "./types.js";

/** Options of commands.createPty. */
export interface PtyOptions extends CallOptions {
  /** Shell source; empty = an interactive login shell. */
  command?: string;
  cwd?: string;
  envs?: Record<string, string>;
  cols?: number;
  rows?: number;
  /** Called with every chunk of output (channels stdout and replay). */
  onData?: (data: Uint8Array) => void;
}

const STDIN = 0x00;

/** A terminal: write input, resize, read output, kill. */
export class Pty {
  private queue: Uint8Array[] = [];
  private waiters: Array<() => void> = [];
  private closed = false;
  private exitCode: number | undefined;
  private exited: Promise<number>;
  private resolveExit!: (code: number) => void;
  private rejectExit!: (e: unknown) => void;

  private constructor(private readonly sb: Sandbox, readonly id: string, private readonly ws: WebSocket, private readonly onData?: (d: Uint8Array) => void) {
    this.exited = new Promise((res, rej) => {
      this.resolveExit = res;
      this.rejectExit = rej;
    });
    this.exited.catch(() => undefined);
  }

  /** @internal */
  static async open(sb: Sandbox, opts: PtyOptions): Promise<Pty> {
    const WS = sb.connection.WebSocket;
    if (!WS) throw new HyboxError("hybox: no WebSocket in this environment: pass `WebSocket` in the connection options");
    const t = await sb.execd(opts);
    const body: Record<string, unknown> = {};
    for (const k of ["command", "cwd", "envs", "cols", "rows"] as const) if (opts[k] !== undefined) body[k] = opts[k];
    const created = await t.json<PtyCreated>({ method: "POST", path: "/pty", json: body, signal: opts.signal, requestTimeoutMs: opts.requestTimeoutMs });
    const url = t.url(`/pty/${enc(created.session_id)}/ws`).replace(/^http/, "ws");
    const isNodeWs = (WS as unknown as { name?: string }).name === "WebSocket" && "Server" in (WS as object);
    const ws = isNodeWs ? new WS(url, [], { headers: t.headers }) : dialWithHeaders(WS, url, t.headers);
    ws.binaryType = "arraybuffer";
    const pty = new Pty(sb, created.session_id, ws, opts.onData);
    await pty.attach(opts.signal);
    return pty;
  }

  private attach(signal?: AbortSignal): Promise<void> {
    return new Promise((resolve, reject) => {
      let connected = false;
      const onAbort = () => {
        this.ws.close();
        reject(signal!.reason);
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.ws.onmessage = (m: MessageEvent) => {
        if (typeof m.data === "string") {
          const msg = JSON.parse(m.data) as PtyServerMessage;
          if (msg.type === "connected" && !connected) {
            connected = true;
            signal?.removeEventListener("abort", onAbort);
            resolve();
          } else if (msg.type === "exit") {
            this.exitCode = msg.exit_code ?? -1;
            this.resolveExit(this.exitCode);
          }
          return;
        }
        const b = new Uint8Array(m.data as ArrayBuffer);
        if (b.length === 0) return;
        const data = b.subarray(1);
        this.onData?.(data);
        this.queue.push(data);
        this.wake();
      };
      this.ws.onerror = () => {
        if (!connected) reject(new UnavailableError("hybox: terminal WebSocket failed"));
      };
      this.ws.onclose = () => {
        this.closed = true;
        this.wake();
        if (!connected) reject(new UnavailableError("hybox: terminal WebSocket closed before connecting"));
        if (this.exitCode === undefined) this.rejectExit(new UnavailableError("hybox: terminal closed without an exit code"));
      };
    });
  }

  private wake(): void {
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }

  /** Writes keystrokes to the program. */
  sendInput(data: string | Uint8Array): void {
    const bytes = typeof data === "string" ? new TextEncoder().encode(data) : data;
    const msg = new Uint8Array(bytes.length + 1);
    msg[0] = STDIN;
    msg.set(bytes, 1);
    this.ws.send(msg);
  }

  /** Changes the terminal's size. */
  resize(cols: number, rows: number): void {
    this.ws.send(JSON.stringify({ type: "resize", cols, rows }));
  }

  /** Sends a signal (`SIGINT`, `INT`, ...) to the program. */
  signal(name: string): void {
    this.ws.send(JSON.stringify({ type: "signal", signal: name }));
  }

  /** The program's output as it arrives, until the terminal closes. */
  async *output(): AsyncGenerator<Uint8Array> {
    for (;;) {
      const next = this.queue.shift();
      if (next) {
        yield next;
        continue;
      }
      if (this.closed) return;
      await new Promise<void>((r) => this.waiters.push(r));
    }
  }

  /** Resolves with the program's exit code when it ends. */
  wait(): Promise<number> {
    return this.exited;
  }

  /** Kills the program and closes the terminal. */
  async kill(opts: CallOptions = {}): Promise<void> {
    try {
      await (await this.sb.execd(opts)).call({ method: "DELETE", path: `/pty/${enc(this.id)}`, ...opts });
    } finally {
      this.ws.close();
    }
  }
}

/**
 * Opens a WebSocket with headers where the runtime's WebSocket takes them
 * (undici's, in Node ≥ 22, Deno, Bun: `{headers}` as the second argument).
 * A browser's WebSocket cannot send headers and refuses that argument; it is
 * then opened without them, and the server refuses it unless the endpoint
 * needs none.
 */
function dialWithHeaders(WS: WebSocketLike, url: string, headers: Record<string, string>): WebSocket {
  try {
    return new WS(url, { headers } as unknown as string[]);
  } catch (e) {
    if ((e as Error)?.name !== "SyntaxError") throw e;
    return new WS(url);
  }
}
