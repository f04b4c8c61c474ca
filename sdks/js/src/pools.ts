// Warm pools of container sandboxes (/pools) and named volumes (/volumes):
// server-wide resources, not a sandbox's.
import { type CallOptions, type ConnectionOptions } from "./transport.js";
import { enc, split } from "./sandbox.js";
import type { CreatePoolRequest, NamedVolume, PoolCapacitySpec, PoolInfo } from "./types.js";

type Opts = ConnectionOptions & CallOptions;

/** Options of {@link Pool.create}. */
export interface PoolCreateOptions extends Opts {
  /** The image of the members (present on the server). */
  image: string;
  /** `runc` or `runsc` (default: the server's default container runtime). */
  runtime?: string;
  /** Idle members kept (default 2). */
  size?: number;
  /** Idle plus claimed members at most (default 1024). */
  maxSize?: number;
  /** Limits the members start with (`{ cpu: "1", memory: "1Gi" }`). */
  resourceLimits?: Record<string, string>;
  /** Replace idle members older than this many seconds (0 = never). */
  maxIdleSeconds?: number;
}

/**
 * Warm pools: containers of one image and runtime started ahead, which a
 * create of that image and runtime claims instead of starting one.
 */
export class Pool {
  /** Every pool of the server, with its status. */
  static async list(opts: Opts = {}): Promise<PoolInfo[]> {
    const { conn, call } = split(opts);
    return (await conn.api().json<{ items: PoolInfo[] }>({ method: "GET", path: "/pools", ...call })).items;
  }

  /**
   * One pool and its status.
   * @throws NotFoundError when there is no such pool.
   */
  static async get(name: string, opts: Opts = {}): Promise<PoolInfo> {
    const { conn, call } = split(opts);
    return conn.api().json<PoolInfo>({ method: "GET", path: `/pools/${enc(name)}`, ...call });
  }

  /**
   * Creates a pool; its members start in the background.
   * @throws InvalidArgumentError for a bad name or capacity, an image the server lacks, a runtime that keeps no pools.
   * @throws ConflictError when the name is taken.
   */
  static async create(name: string, opts: PoolCreateOptions): Promise<PoolInfo> {
    const { conn, call, rest } = split(opts);
    const { image, runtime, size = 2, maxSize = 1024, resourceLimits, maxIdleSeconds } = rest as PoolCreateOptions;
    const body: CreatePoolRequest = {
      name,
      template: { image: { uri: image }, runtime, resourceLimits, maxIdleSeconds },
      capacitySpec: { bufferMin: size, bufferMax: size, poolMin: 0, poolMax: Math.max(maxSize, size) },
    };
    return conn.api().json<PoolInfo>({ method: "POST", path: "/pools", json: body, ...call });
  }

  /**
   * Changes how many idle members a pool keeps.
   * @throws NotFoundError when there is no such pool.
   */
  static async resize(name: string, size: number, opts: Opts & { maxSize?: number } = {}): Promise<PoolInfo> {
    const { conn, call, rest } = split(opts);
    const maxSize = (rest as { maxSize?: number }).maxSize ?? 1024;
    const capacitySpec: PoolCapacitySpec = { bufferMin: size, bufferMax: size, poolMin: 0, poolMax: Math.max(maxSize, size) };
    return conn.api().json<PoolInfo>({ method: "PUT", path: `/pools/${enc(name)}`, json: { capacitySpec }, ...call });
  }

  /**
   * Deletes a pool and its idle members; sandboxes claimed from it keep running.
   * @throws NotFoundError when there is no such pool.
   */
  static async delete(name: string, opts: Opts = {}): Promise<void> {
    const { conn, call } = split(opts);
    await conn.api().call({ method: "DELETE", path: `/pools/${enc(name)}`, ...call });
  }
}

/**
 * Named volumes: directories the server keeps, which sandboxes mount by
 * name (a create's `pvc` volume) and share.
 */
export class Volume {
  /** Every named volume and the sandboxes using it. */
  static async list(opts: Opts = {}): Promise<NamedVolume[]> {
    const { conn, call } = split(opts);
    return (await conn.api().json<{ items: NamedVolume[] }>({ method: "GET", path: "/volumes", ...call })).items;
  }

  /**
   * One named volume.
   * @throws NotFoundError when there is none of that name.
   */
  static async get(name: string, opts: Opts = {}): Promise<NamedVolume> {
    const { conn, call } = split(opts);
    return conn.api().json<NamedVolume>({ method: "GET", path: `/volumes/${enc(name)}`, ...call });
  }

  /**
   * Makes an empty named volume.
   * @throws ConflictError when it exists.
   */
  static async create(name: string, opts: Opts = {}): Promise<NamedVolume> {
    const { conn, call } = split(opts);
    return conn.api().json<NamedVolume>({ method: "POST", path: "/volumes", json: { name }, ...call });
  }

  /**
   * Removes a named volume and its files.
   * @throws ConflictError while a sandbox uses it; NotFoundError when there is none.
   */
  static async delete(name: string, opts: Opts = {}): Promise<void> {
    const { conn, call } = split(opts);
    await conn.api().call({ method: "DELETE", path: `/volumes/${enc(name)}`, ...call });
  }
}
