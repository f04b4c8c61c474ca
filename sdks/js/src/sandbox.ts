// The Sandbox handle: lifecycle calls and the per-sandbox APIs.
import { Code } from "./code.js";
import { Commands } from "./commands.js";
import { Egress, Vault } from "./egress.js";
import { Files } from "./files.js";
import { Connection, Transport, type CallOptions, type ConnectionOptions } from "./transport.js";
import type { CreateSandboxRequest, Endpoint, ForkSandboxRequest, ForkSandboxResponse, ImageSpec, ListSandboxesResponse, MetadataPatch, Metrics, SandboxInfo, SandboxState } from "./types.js";

/** The execd API's sandbox port. */
export const EXECD_PORT = 44772;
/** The egress API's sandbox port. */
export const EGRESS_PORT = 18080;

/** Options of Sandbox.create: the wire request, with `image` optional (default `wasm://default`). */
export type SandboxCreateOptions = Omit<CreateSandboxRequest, "image"> & {
  image?: string | ImageSpec;
} & ConnectionOptions & CallOptions;

/** Options of Sandbox.list. */
export interface SandboxListOptions extends ConnectionOptions, CallOptions {
  /** Sandboxes in any of these states. */
  states?: SandboxState[];
  /** Sandboxes having all of these metadata entries. */
  metadata?: Record<string, string>;
  page?: number;
  pageSize?: number;
}

/** A sandbox endpoint: the URL of a sandbox port and the headers every request to it needs. */
export interface SandboxEndpoint {
  /** `http(s)://...` */
  url: string;
  headers: Record<string, string>;
}

/** A sandbox on a hybox server. */
export class Sandbox {
  /** The sandbox id. */
  readonly id: string;
  /** Shell commands: foreground, background, sessions, terminals. */
  readonly commands: Commands;
  /** Code execution in persistent contexts. */
  readonly code: Code;
  /** The sandbox's filesystem. */
  readonly files: Files;
  /** The sandbox's network egress policy. */
  readonly egress: Egress;
  /** The sandbox's credential vault. */
  readonly vault: Vault;
  /** @internal */
  readonly connection: Connection;
  private last: SandboxInfo | undefined;
  private endpoints = new Map<number, Promise<Endpoint>>();

  private constructor(conn: Connection, id: string, info?: SandboxInfo) {
    this.connection = conn;
    this.id = id;
    this.last = info;
    this.commands = new Commands(this);
    this.code = new Code(this);
    this.files = new Files(this);
    this.egress = new Egress(this);
    this.vault = new Vault(this);
  }

  /**
   * Creates a sandbox (a wasm sandbox unless `image` names a container image)
   * and returns its handle at once; wasm sandboxes are running by then.
   * @throws InvalidArgumentError for a bad request, AuthenticationError, UnavailableError.
   */
  static async create(opts: SandboxCreateOptions = {}): Promise<Sandbox> {
    const { conn, call, rest } = split(opts);
    const { image, ...req } = rest as Omit<SandboxCreateOptions, keyof ConnectionOptions | keyof CallOptions>;
    const body: CreateSandboxRequest = {
      ...req,
      image: typeof image === "string" ? { uri: image } : (image ?? { uri: "wasm://default" }),
    } as CreateSandboxRequest;
    const info = await conn.api().json<SandboxInfo>({ method: "POST", path: "/sandboxes", json: body, ...call });
    return new Sandbox(conn, info.id, info);
  }

  /**
   * Connects to an existing sandbox.
   * @throws NotFoundError when there is no such sandbox.
   */
  static async connect(id: string, opts: ConnectionOptions & CallOptions = {}): Promise<Sandbox> {
    const { conn, call } = split(opts);
    const sb = new Sandbox(conn, id);
    await sb.getInfo(call);
    return sb;
  }

  /** Lists sandboxes, one page (filters: states, metadata). */
  static async list(opts: SandboxListOptions = {}): Promise<ListSandboxesResponse> {
    const { conn, call, rest } = split(opts);
    const { states, metadata, page, pageSize } = rest as SandboxListOptions;
    return conn.api().json<ListSandboxesResponse>({
      method: "GET",
      path: "/sandboxes",
      query: {
        state: states,
        metadata: metadata ? new URLSearchParams(metadata).toString() : undefined,
        page,
        pageSize,
      },
      ...call,
    });
  }

  /**
   * Kills the sandbox with this id.
   * @throws NotFoundError when there is no such sandbox.
   */
  static async kill(id: string, opts: ConnectionOptions & CallOptions = {}): Promise<void> {
    const { conn, call } = split(opts);
    await conn.api().call({ method: "DELETE", path: `/sandboxes/${enc(id)}`, ...call });
  }

  /** The last state read from the server (at create, connect or getInfo). */
  get info(): SandboxInfo | undefined {
    return this.last;
  }

  /** Kills the sandbox and removes its files. */
  async kill(opts: CallOptions = {}): Promise<void> {
    await this.api().call({ method: "DELETE", path: this.path(""), ...opts });
  }

  /**
   * Copies the sandbox `count` times (1..16, default 1): each copy runs with a copy of the
   * workspace and of every code context's state (ids, execution counts, variables), and the
   * metadata with `metadata` merged over it. Copies and source are independent.
   * @throws InvalidArgumentError for a bad count; an error of kind not supported for a runtime
   * that cannot fork (only wasm can today).
   */
  async fork(opts: ForkSandboxRequest & CallOptions = {}): Promise<Sandbox[]> {
    const { count, metadata, ...call } = opts;
    const body: ForkSandboxRequest = {};
    if (count !== undefined) body.count = count;
    if (metadata !== undefined) body.metadata = metadata;
    const out = await this.api().json<ForkSandboxResponse>({ method: "POST", path: this.path("/fork"), json: body, ...call });
    return out.sandboxes.map((info) => new Sandbox(this.connection, info.id, info));
  }

  /** Pauses the sandbox (state Pausing → Paused); executions are refused until resume. */
  async pause(opts: CallOptions = {}): Promise<void> {
    await this.api().call({ method: "POST", path: this.path("/pause"), ...opts });
  }

  /** Resumes a paused sandbox. */
  async resume(opts: CallOptions = {}): Promise<void> {
    await this.api().call({ method: "POST", path: this.path("/resume"), ...opts });
  }

  /** Reads the sandbox's state from the server. */
  async getInfo(opts: CallOptions = {}): Promise<SandboxInfo> {
    this.last = await this.api().json<SandboxInfo>({ method: "GET", path: this.path(""), ...opts });
    return this.last;
  }

  /** Sets the expiry to `expiresAt` and returns the server's expiry. */
  async renew(expiresAt: Date, opts: CallOptions = {}): Promise<Date> {
    const r = await this.api().json<{ expiresAt: string }>({
      method: "POST",
      path: this.path("/renew-expiration"),
      json: { expiresAt: expiresAt.toISOString() },
      ...opts,
    });
    return new Date(r.expiresAt);
  }

  /** Makes the sandbox expire `seconds` from now; returns the new expiry. */
  async setTimeout(seconds: number, opts: CallOptions = {}): Promise<Date> {
    return this.renew(new Date(Date.now() + seconds * 1000), opts);
  }

  /** Changes metadata by a JSON merge patch (`null` deletes a key). */
  async patchMetadata(patch: MetadataPatch, opts: CallOptions = {}): Promise<SandboxInfo> {
    this.last = await this.api().json<SandboxInfo>({ method: "PATCH", path: this.path("/metadata"), json: patch, ...opts });
    return this.last;
  }

  /**
   * Where to reach a port of the sandbox: a URL and the headers to send with
   * every request to it. Cached per port.
   */
  async endpoint(port: number, opts: CallOptions = {}): Promise<SandboxEndpoint> {
    const ep = await this.rawEndpoint(port, opts);
    const t = this.connection.endpoint(ep.endpoint, ep.headers);
    return { url: t.baseUrl, headers: { ...ep.headers } };
  }

  /** Whether the sandbox's execd answers. */
  async ping(opts: CallOptions = {}): Promise<void> {
    await (await this.execd(opts)).call({ method: "GET", path: "/ping", ...opts });
  }

  /** CPU and memory use of the sandbox. */
  async metrics(opts: CallOptions = {}): Promise<Metrics> {
    return (await this.execd(opts)).json<Metrics>({ method: "GET", path: "/metrics", ...opts });
  }

  /** @internal the transport of the sandbox's execd API. */
  async execd(opts: CallOptions = {}): Promise<Transport> {
    return this.transport(EXECD_PORT, opts);
  }

  /** @internal the transport of the sandbox's egress API. */
  async egressApi(opts: CallOptions = {}): Promise<Transport> {
    return this.transport(EGRESS_PORT, opts);
  }

  private async transport(port: number, opts: CallOptions): Promise<Transport> {
    const ep = await this.rawEndpoint(port, opts);
    return this.connection.endpoint(ep.endpoint, ep.headers);
  }

  private rawEndpoint(port: number, opts: CallOptions): Promise<Endpoint> {
    let p = this.endpoints.get(port);
    if (!p) {
      p = this.api().json<Endpoint>({ method: "GET", path: this.path(`/endpoints/${port}`), ...opts });
      this.endpoints.set(port, p);
      p.catch(() => this.endpoints.delete(port));
    }
    return p;
  }

  private api(): Transport {
    return this.connection.api();
  }

  private path(suffix: string): string {
    return `/sandboxes/${enc(this.id)}${suffix}`;
  }
}

export function enc(s: string): string {
  return encodeURIComponent(s);
}

const connKeys = ["domain", "apiKey", "maxRetries", "maxRetryWaitMs", "requestTimeoutMs", "headers", "fetch", "WebSocket"] as const;

/** Splits options into the connection, the call's options and the rest. */
export function split<T extends ConnectionOptions & CallOptions>(opts: T): { conn: Connection; call: CallOptions; rest: Omit<T, keyof ConnectionOptions | keyof CallOptions> } {
  const c: Record<string, unknown> = {};
  const rest: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(opts)) {
    if ((connKeys as readonly string[]).includes(k)) c[k] = v;
    else if (k !== "signal") rest[k] = v;
  }
  const call: CallOptions = {};
  if (opts.signal) call.signal = opts.signal;
  if (opts.requestTimeoutMs !== undefined) call.requestTimeoutMs = opts.requestTimeoutMs;
  return { conn: new Connection(c as ConnectionOptions), call, rest: rest as Omit<T, keyof ConnectionOptions | keyof CallOptions> };
}
