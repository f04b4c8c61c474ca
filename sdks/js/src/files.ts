// The sandbox's filesystem.
import { NotFoundError } from "./errors.js";
import type { Sandbox } from "./sandbox.js";
import type { CallOptions } from "./transport.js";
import type { FileInfo, FileMode, ReplaceResult } from "./types.js";

/** What files.write accepts. */
export type FileData = string | Uint8Array | ArrayBuffer | Blob | ReadableStream<Uint8Array>;

/** One file of files.writeMany. */
export interface WriteEntry {
  path: string;
  data: FileData;
  /** Permission bits as octal digits in a decimal number (644 means 0o644). */
  mode?: FileMode;
  owner?: string;
  group?: string;
}

/** A sandbox's filesystem. */
export class Files {
  constructor(private readonly sb: Sandbox) {}

  /** Reads a file as UTF-8 text. @throws NotFoundError when it does not exist. */
  async read(path: string, opts: CallOptions = {}): Promise<string> {
    return (await this.download(path, opts)).text();
  }

  /** Reads a file's bytes. */
  async readBytes(path: string, opts: CallOptions = {}): Promise<Uint8Array> {
    return new Uint8Array(await (await this.download(path, opts)).arrayBuffer());
  }

  /** Reads a file as a stream of bytes, for files too big to hold. */
  async readStream(path: string, opts: CallOptions = {}): Promise<ReadableStream<Uint8Array>> {
    const resp = await this.download(path, opts);
    return resp.body ?? new ReadableStream({ start: (c) => c.close() });
  }

  private async download(path: string, opts: CallOptions): Promise<Response> {
    return (await this.sb.execd(opts)).send({ method: "GET", path: "/files/download", query: { path }, ...opts, stream: true });
  }

  /** Writes a file (text, bytes, a Blob or a stream), creating its parents. */
  async write(path: string, data: FileData, opts: CallOptions & Omit<WriteEntry, "path" | "data"> = {}): Promise<void> {
    const { signal, requestTimeoutMs, ...meta } = opts;
    await this.writeMany([{ path, data, ...meta }], { signal, requestTimeoutMs });
  }

  /** Writes several files in one request. */
  async writeMany(entries: WriteEntry[], opts: CallOptions = {}): Promise<void> {
    const t = await this.sb.execd(opts);
    const streaming = entries.some((e) => typeof ReadableStream !== "undefined" && e.data instanceof ReadableStream);
    if (!streaming) {
      const form = new FormData();
      for (const e of entries) {
        form.append("metadata", new Blob([JSON.stringify(metadata(e))], { type: "application/json" }), "metadata");
        form.append("file", toBlob(e.data as Exclude<FileData, ReadableStream>), "file");
      }
      await t.call({ method: "POST", path: "/files/upload", body: form, ...opts });
      return;
    }
    const boundary = "hybox-" + Math.random().toString(16).slice(2) + Date.now().toString(16);
    await t.call({
      method: "POST",
      path: "/files/upload",
      body: multipartStream(entries, boundary),
      headers: { "Content-Type": `multipart/form-data; boundary=${boundary}` },
      ...opts,
    });
  }

  /** Lists a directory (`depth` levels, default 1). */
  async list(path: string, opts: CallOptions & { depth?: number } = {}): Promise<FileInfo[]> {
    const { depth, ...call } = opts;
    const list = await (await this.sb.execd(call)).json<FileInfo[] | null>({ method: "GET", path: "/directories/list", query: { path, depth }, ...call });
    return list ?? [];
  }

  /** Whether a path exists. */
  async exists(path: string, opts: CallOptions = {}): Promise<boolean> {
    try {
      await this.info(path, opts);
      return true;
    } catch (e) {
      if (e instanceof NotFoundError) return false;
      throw e;
    }
  }

  /** Describes a path (symlinks are described, not followed). @throws NotFoundError. */
  async info(path: string, opts: CallOptions = {}): Promise<FileInfo> {
    const m = await (await this.sb.execd(opts)).json<Record<string, FileInfo>>({ method: "GET", path: "/files/info", query: { path: [path] }, ...opts });
    const fi = m[path] ?? Object.values(m)[0];
    if (!fi) throw new NotFoundError(`hybox: ${path}: no such file`, { status: 404, code: "FILE_NOT_FOUND" });
    return fi;
  }

  /** Removes a file, or a directory with everything in it; a missing path is not an error. */
  async remove(path: string, opts: CallOptions = {}): Promise<void> {
    let dir = false;
    try {
      dir = (await this.info(path, opts)).type === "directory";
    } catch (e) {
      if (e instanceof NotFoundError) return;
      throw e;
    }
    const t = await this.sb.execd(opts);
    await t.call({ method: "DELETE", path: dir ? "/directories" : "/files", query: { path: [path] }, ...opts });
  }

  /** Renames (moves) a file or directory. @throws ConflictError when dest exists. */
  async rename(src: string, dest: string, opts: CallOptions = {}): Promise<void> {
    await (await this.sb.execd(opts)).call({ method: "POST", path: "/files/mv", json: [{ src, dest }], ...opts });
  }

  /** Creates a directory and its parents (mode default 755). */
  async makeDir(path: string, opts: CallOptions & { mode?: FileMode } = {}): Promise<void> {
    const { mode, ...call } = opts;
    await (await this.sb.execd(call)).call({ method: "POST", path: "/directories", json: { [path]: mode === undefined ? {} : { mode } }, ...call });
  }

  /** Finds files under dir whose names match a glob pattern. */
  async search(dir: string, pattern: string, opts: CallOptions = {}): Promise<FileInfo[]> {
    const list = await (await this.sb.execd(opts)).json<FileInfo[] | null>({ method: "GET", path: "/files/search", query: { path: dir, pattern }, ...opts });
    return list ?? [];
  }

  /** Replaces every occurrence of `oldText` with `newText` in a file; returns how many were replaced. */
  async replace(path: string, oldText: string, newText: string, opts: CallOptions = {}): Promise<number> {
    const m = await (await this.sb.execd(opts)).json<Record<string, ReplaceResult>>({
      method: "POST",
      path: "/files/replace",
      query: { verbose: true },
      json: { [path]: { old: oldText, new: newText } },
      ...opts,
    });
    return (m?.[path] ?? Object.values(m ?? {})[0])?.replacedCount ?? 0;
  }

  /** Sets mode, owner and group of a path. */
  async setPermissions(path: string, perm: { mode?: FileMode; owner?: string; group?: string }, opts: CallOptions = {}): Promise<void> {
    await (await this.sb.execd(opts)).call({ method: "POST", path: "/files/permissions", json: { [path]: perm }, ...opts });
  }
}

function metadata(e: WriteEntry): Record<string, unknown> {
  const m: Record<string, unknown> = { path: e.path };
  if (e.mode !== undefined) m.mode = e.mode;
  if (e.owner !== undefined) m.owner = e.owner;
  if (e.group !== undefined) m.group = e.group;
  return m;
}

function toBlob(d: Exclude<FileData, ReadableStream>): Blob {
  if (d instanceof Blob) return d;
  if (typeof d === "string") return new Blob([d]);
  return new Blob([d as BlobPart]);
}

function multipartStream(entries: WriteEntry[], boundary: string): ReadableStream<Uint8Array> {
  const enc = new TextEncoder();
  async function* parts(): AsyncGenerator<Uint8Array> {
    for (const e of entries) {
      yield enc.encode(
        `--${boundary}\r\nContent-Disposition: form-data; name="metadata"; filename="metadata"\r\nContent-Type: application/json\r\n\r\n` +
          JSON.stringify(metadata(e)) +
          `\r\n--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="file"\r\nContent-Type: application/octet-stream\r\n\r\n`,
      );
      const d = e.data;
      if (d instanceof ReadableStream) {
        const r = d.getReader();
        for (;;) {
          const { done, value } = await r.read();
          if (done) break;
          yield value;
        }
      } else {
        yield new Uint8Array(await toBlob(d).arrayBuffer());
      }
      yield enc.encode("\r\n");
    }
    yield enc.encode(`--${boundary}--\r\n`);
  }
  const it = parts();
  return new ReadableStream<Uint8Array>({
    async pull(c) {
      const { done, value } = await it.next();
      if (done) c.close();
      else c.enqueue(value);
    },
    async cancel() {
      await it.return(undefined);
    },
  });
}
