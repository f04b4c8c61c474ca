// End-to-end suite: the official OpenSandbox JS SDK (@alibaba-group/opensandbox, used
// unchanged) drives a running hybox server.
//
// Env:
//   HYBOX_E2E_URL         lifecycle server base, e.g. http://127.0.0.1:18080 (no /v1)
//   OPEN_SANDBOX_API_KEY  API key the server accepts
//   HYBOX_E2E_IMAGE       image of the sandboxes under test (default wasm://default)
//   HYBOX_E2E_RUNTIME     when set, sent as extensions["hybox.io/runtime"] (runc, runsc, ...)
//   HYBOX_E2E_HOST_DIR    a host directory the server allows as a volume (unset: the
//                         volume test is skipped and says why)
//   HYBOX_E2E_LANG_IMAGE  an image with a JDK and Go (the code-interpreter test image):
//                         the container passes run Java and Go contexts in it
//
// The same tests run against wasm and container sandboxes; only what is
// wasm-specific differs (sys.platform, the code-interpreter image routing).
//
// The JS code-interpreter SDK is not published on npm, so code runs go through
// `runCode` below: it builds the execd URL and headers exactly as the core SDK does
// for its own execd calls (endpoint from getEndpoint, scheme from the connection,
// connection headers merged with the endpoint's headers), and feeds the stream
// into the SDK's exported ExecutionEventDispatcher.

import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";

import {
  ConnectionConfig,
  ExecutionEventDispatcher,
  Sandbox,
  SandboxManager,
} from "@alibaba-group/opensandbox";

const BASE_URL = (process.env.HYBOX_E2E_URL ?? "").replace(/\/+$/, "");
const API_KEY = process.env.OPEN_SANDBOX_API_KEY ?? "";
if (!BASE_URL || !API_KEY) {
  throw new Error("HYBOX_E2E_URL and OPEN_SANDBOX_API_KEY must be set");
}

const IMAGE = process.env.HYBOX_E2E_IMAGE || "wasm://default";
const RUNTIME = (process.env.HYBOX_E2E_RUNTIME ?? "").trim();
const WASM = RUNTIME ? RUNTIME.toLowerCase() === "wasm" : IMAGE.startsWith("wasm://");
const PLATFORM = WASM ? "wasi" : "linux";
const PASS = RUNTIME ? `${IMAGE} on ${RUNTIME}` : IMAGE;
const EXTENSIONS = RUNTIME ? { "hybox.io/runtime": RUNTIME } : {};

const HOST_DIR = process.env.HYBOX_E2E_HOST_DIR ?? "";
// Set (to the reason) where the server's named volumes cannot be made, e.g.
// PersistentVolumeClaims on a cluster with no storage provisioner: the
// volume test then mounts host volumes only.
const NO_PVC = process.env.HYBOX_E2E_NO_PVC ?? "";
// Set (to the reason) where the pass's runtime refuses egress policies and
// credential vaults (gVisor Pods on Kubernetes): the suite then checks the
// refusal instead of the policy and vault tests.
const EGRESS_REFUSED = process.env.HYBOX_E2E_EGRESS_REFUSED ?? "";
const EGRESS_SKIP = EGRESS_REFUSED ? `egress policies are refused on this pass (${EGRESS_REFUSED})` : false;
const LANG_IMAGE = process.env.HYBOX_E2E_LANG_IMAGE ?? "";
const EXECD_PORT = 44772;
const RUN_ID = randomUUID();
const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
const WORK_DIR = `/tmp/hybox-e2e-js-${RUN_ID.slice(0, 8)}`;

function connection(apiKey = API_KEY) {
  return new ConnectionConfig({ domain: BASE_URL, apiKey, requestTimeoutSeconds: 60 });
}

/** Create a sandbox of the kind under test (image and runtime from the env). */
function createSandbox(role) {
  return Sandbox.create({
    connectionConfig: connection(),
    image: IMAGE,
    extensions: EXTENSIONS,
    metadata: { suite: "hybox-e2e-js", run: RUN_ID, role },
    timeoutSeconds: 300,
  });
}

function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}

/** Resolve the execd base URL and headers the same way the SDK does. */
async function execdTarget(sbx) {
  const ep = await sbx.getEndpoint(EXECD_PORT);
  assert.equal(typeof ep.endpoint, "string");
  assert.ok(!/^[a-z]+:\/\//i.test(ep.endpoint), `endpoint must carry no scheme: ${ep.endpoint}`);
  return {
    base: `${sbx.connectionConfig.protocol}://${ep.endpoint}`.replace(/\/+$/, ""),
    headers: { ...sbx.connectionConfig.headers, ...(ep.headers ?? {}) },
  };
}

async function createContext(sbx, language) {
  const t = await execdTarget(sbx);
  const res = await fetch(`${t.base}/code/context`, {
    method: "POST",
    headers: { ...t.headers, "content-type": "application/json" },
    body: JSON.stringify({ language }),
  });
  const text = await res.text();
  assert.equal(res.status, 200, `POST /code/context -> ${res.status} ${text}`);
  const ctx = JSON.parse(text);
  assert.equal(ctx.language, language);
  assert.equal(typeof ctx.id, "string");
  assert.ok(ctx.id.length > 0);
  return ctx;
}

/**
 * Run code through POST /code and return { execution, events }. Every event must be
 * one JSON object per line with a string `type` and an integer `timestamp`
 * (the Python SDK drops events without them).
 */
async function runCode(sbx, code, context) {
  const t = await execdTarget(sbx);
  const res = await fetch(`${t.base}/code`, {
    method: "POST",
    headers: { ...t.headers, accept: "text/event-stream", "content-type": "application/json" },
    body: JSON.stringify({ code, context: { language: context.language, ...(context.id ? { id: context.id } : {}) } }),
  });
  if (res.status !== 200) {
    assert.fail(`POST /code -> ${res.status} ${await res.text()}`);
  }
  assert.match(res.headers.get("content-type") ?? "", /text\/event-stream/);
  const body = await res.text();
  const execution = { logs: { stdout: [], stderr: [] }, result: [] };
  const dispatcher = new ExecutionEventDispatcher(execution);
  const events = [];
  for (const raw of body.split("\n")) {
    let line = raw.trim();
    if (!line || line.startsWith(":")) continue;
    if (line.startsWith("data:")) line = line.slice(5).trim();
    const ev = JSON.parse(line);
    events.push(ev);
    await dispatcher.dispatch(ev);
  }
  for (const ev of events) {
    assert.equal(typeof ev.type, "string", `event without type: ${JSON.stringify(ev)}`);
    assert.ok(Number.isInteger(ev.timestamp), `event without integer timestamp: ${JSON.stringify(ev)}`);
  }
  assert.ok(
    events.some((ev) => ev.type === "execution_complete" || ev.type === "error"),
    `the stream of ${JSON.stringify(code)} ended without execution_complete or error (truncated?): ${body}`,
  );
  return { execution, events };
}

function resultTexts(execution) {
  return execution.result.map((r) => r.text);
}

function stdoutText(execution) {
  return execution.logs.stdout.map((m) => m.text).join("");
}

async function expectApiStatus(promise, statuses) {
  try {
    await promise;
  } catch (err) {
    assert.ok(statuses.includes(err.statusCode), `expected status ${statuses}, got ${err.statusCode}: ${err.message}`);
    return err;
  }
  assert.fail(`expected an API error with status ${statuses}`);
}

describe(`hybox through the OpenSandbox JS SDK (${PASS})`, () => {
  /** @type {Sandbox} */
  let sbx;
  /** @type {Sandbox} the second sandbox of the list and kill tests */
  let second;
  /** @type {SandboxManager} */
  let manager;
  const created = [];

  before(async () => {
    manager = SandboxManager.create({ connectionConfig: connection() });
    sbx = await createSandbox("default");
    created.push(sbx);
  });

  /**
   * The second sandbox: on wasm the code-interpreter image (whose routing to
   * wasm is tested), elsewhere one more sandbox of the kind under test.
   */
  async function secondSandbox() {
    if (second) return second;
    if (WASM) {
      second = await Sandbox.create({
        connectionConfig: connection(),
        image: "opensandbox/code-interpreter:latest",
        entrypoint: ["/opt/code-interpreter/code-interpreter.sh"],
        metadata: { suite: "hybox-e2e-js", run: RUN_ID, role: "code-interpreter" },
        timeoutSeconds: 300,
      });
    } else {
      second = await createSandbox("second");
    }
    created.push(second);
    return second;
  }

  after(async () => {
    for (const s of created) {
      try {
        await s.kill();
      } catch {
        // already gone
      }
      await s.close();
    }
    if (manager) await manager.close();
  });

  it("creates a Running sandbox and reads it back", async () => {
    assert.match(sbx.id, UUID_V4);
    const info = await sbx.getInfo();
    assert.equal(info.id, sbx.id);
    assert.equal(info.status.state, "Running");
    assert.equal(info.image?.uri, IMAGE);
    if (RUNTIME) assert.equal(info.extensions?.["hybox.io/runtime"], RUNTIME, "the runtime extension is read back");
    assert.deepEqual(info.entrypoint, ["tail", "-f", "/dev/null"]);
    assert.equal(info.metadata?.run, RUN_ID);
    assert.equal(info.metadata?.suite, "hybox-e2e-js");
    assert.ok(info.createdAt instanceof Date);
    assert.ok(info.expiresAt instanceof Date, "expiresAt must be set when a timeout is given");
    const lifetime = (info.expiresAt.getTime() - info.createdAt.getTime()) / 1000;
    assert.ok(Math.abs(lifetime - 300) <= 10, `expiresAt - createdAt = ${lifetime}s, want ~300s`);
    assert.equal(await sbx.isHealthy(), true);
  });

  it("renews the expiration", async () => {
    const t0 = Date.now();
    const res = await sbx.renew(1200);
    assert.ok(res.expiresAt instanceof Date);
    const delta = (res.expiresAt.getTime() - t0) / 1000;
    assert.ok(delta > 1190 && delta < 1210, `renewed expiry is ${delta}s ahead, want ~1200s`);
    const info = await sbx.getInfo();
    assert.ok(Math.abs(info.expiresAt.getTime() - res.expiresAt.getTime()) < 2000);
  });

  it("patches metadata", async () => {
    const info = await sbx.patchMetadata({ extra: "yes" });
    assert.equal(info.metadata?.extra, "yes");
    assert.equal(info.metadata?.run, RUN_ID);
    const again = await sbx.patchMetadata({ extra: null });
    assert.equal(again.metadata?.extra, undefined);
  });

  it("runs a command: stdout lines and exit code", async () => {
    const events = [];
    const ex = await sbx.commands.run("echo hi; echo there; exit 3", undefined, { onEvent: (e) => events.push(e) });
    assert.deepEqual(ex.logs.stdout.map((m) => m.text), ["hi", "there"]);
    assert.equal(ex.exitCode, 3);
    assert.equal(ex.error?.value, "3");
    assert.ok(ex.id, "init event must carry the command id");
    for (const e of events) {
      assert.ok(Number.isInteger(e.timestamp), `event without integer timestamp: ${JSON.stringify(e)}`);
    }
    const ok = await sbx.commands.run("echo fine");
    assert.equal(ok.exitCode, 0);
    assert.equal(ok.error, undefined);
    assert.ok(ok.complete, "execution_complete expected on success");
    assert.deepEqual(ok.logs.stdout.map((m) => m.text), ["fine"]);
  });

  it("runs a background command and reports status and logs", async () => {
    const ex = await sbx.commands.run("echo bg-start; sleep 1; echo bg-end; exit 2", { background: true });
    assert.ok(ex.id, "background run must return the command id");
    const deadline = Date.now() + 20_000;
    let status = await sbx.commands.getCommandStatus(ex.id);
    while (status.running && Date.now() < deadline) {
      await sleep(200);
      status = await sbx.commands.getCommandStatus(ex.id);
    }
    assert.equal(status.running, false, "background command did not finish in 20s");
    assert.equal(status.id, ex.id);
    assert.equal(status.exitCode, 2);
    assert.ok(status.startedAt instanceof Date);
    assert.ok(status.finishedAt instanceof Date);
    const logs = await sbx.commands.getBackgroundCommandLogs(ex.id);
    assert.match(logs.content, /bg-start[\s\S]*bg-end/);
    assert.equal(typeof logs.cursor, "number");
    const more = await sbx.commands.getBackgroundCommandLogs(ex.id, logs.cursor);
    assert.equal(more.content, "", "reading from the tail cursor of a finished command yields nothing new");
  });

  it("runs Python with state across runs, a trailing expression and an exception", async () => {
    const ctx = await createContext(sbx, "python");
    const first = await runCode(sbx, "x = 41\nprint('set x')", ctx);
    assert.equal(first.execution.error, undefined);
    assert.equal(stdoutText(first.execution).trim(), "set x");
    const second = await runCode(sbx, "x + 1", ctx);
    assert.equal(second.execution.error, undefined);
    assert.deepEqual(resultTexts(second.execution), ["42"]);
    assert.ok(second.execution.complete, "execution_complete expected");
    if (first.execution.executionCount !== undefined || second.execution.executionCount !== undefined) {
      assert.ok(second.execution.executionCount > first.execution.executionCount, "execution_count must grow");
    }

    const expr = await runCode(sbx, "a = 6\nb = 7\na * b", ctx);
    assert.deepEqual(resultTexts(expr.execution), ["42"]);

    const boom = await runCode(sbx, "1 / 0", ctx);
    assert.equal(boom.execution.error?.name, "ZeroDivisionError");
    assert.match(boom.execution.error?.value ?? "", /division by zero/);
    assert.equal(boom.execution.complete, undefined, "no execution_complete after an error");

    const still = await runCode(sbx, "x", ctx);
    assert.deepEqual(resultTexts(still.execution), ["41"], "state survives an exception");

    const platform = await runCode(sbx, "import sys\nsys.platform", ctx);
    assert.deepEqual(resultTexts(platform.execution), [`'${PLATFORM}'`]);
  });

  it("runs Python in the default context when no id is given", async () => {
    const one = await runCode(sbx, "dflt = 'kept'", { language: "python" });
    assert.equal(one.execution.error, undefined);
    const two = await runCode(sbx, "dflt", { language: "python" });
    assert.deepEqual(resultTexts(two.execution), ["'kept'"]);
  });

  it("runs JavaScript with state across runs", async () => {
    const ctx = await createContext(sbx, "javascript");
    const first = await runCode(sbx, "var y = 41;", ctx);
    assert.equal(first.execution.error, undefined);
    const second = await runCode(sbx, "y + 1", ctx);
    assert.equal(second.execution.error, undefined);
    assert.deepEqual(resultTexts(second.execution), ["42"]);
    const log = await runCode(sbx, "console.log('from js')", ctx);
    assert.equal(stdoutText(log.execution).trim(), "from js");
    const boom = await runCode(sbx, "throw new TypeError('boom')", ctx);
    assert.equal(boom.execution.error?.name, "TypeError");
    assert.match(boom.execution.error?.value ?? "", /boom/);
  });

  it("runs TypeScript with state across runs, errors at TypeScript lines", async () => {
    const ctx = await createContext(sbx, "typescript");
    const first = await runCode(sbx, "interface P { n: number }\nconst p: P = { n: 41 }", ctx);
    assert.equal(first.execution.error, undefined);
    const second = await runCode(sbx, "p.n + 1", ctx);
    assert.deepEqual(resultTexts(second.execution), ["42"]);
    // thrown on TypeScript line 4; the JavaScript has it on line 1
    const boom = await runCode(sbx, "type T = {\n  a: string\n}\nthrow new TypeError('boom')", ctx);
    assert.equal(boom.execution.error?.name, "TypeError");
    assert.ok((boom.execution.error?.traceback ?? []).some((l) => l.includes(":4")), JSON.stringify(boom.execution.error));
  });

  it("runs Bash with state across runs", async () => {
    const ctx = await createContext(sbx, "bash");
    assert.equal((await runCode(sbx, "N=41\ncd /tmp", ctx)).execution.error, undefined);
    const second = await runCode(sbx, "echo $((N + 1)) $(pwd)", ctx);
    assert.equal(stdoutText(second.execution), "42 /tmp\n");
    const fail = await runCode(sbx, "(exit 3)", ctx);
    assert.equal(fail.execution.error?.value, "3");
  });

  it("writes, reads, lists, searches and deletes files", async () => {
    const path = `${WORK_DIR}/hello.txt`;
    const content = "hello hybox\n";
    await sbx.files.writeFiles([{ path, data: content }, { path: `${WORK_DIR}/other.md`, data: "# other" }]);

    assert.equal(await sbx.files.readFile(path), content);

    const infos = await sbx.files.getFileInfo([path]);
    assert.equal(infos[path]?.path, path);
    assert.equal(infos[path]?.size, Buffer.byteLength(content));
    assert.equal(infos[path]?.type, "file");
    assert.ok(infos[path]?.modifiedAt instanceof Date);

    const found = await sbx.files.search({ path: WORK_DIR, pattern: "*.txt" });
    assert.deepEqual(found.map((f) => f.path), [path]);

    const listed = await sbx.files.listDirectory({ path: WORK_DIR });
    assert.deepEqual(listed.map((f) => f.path).sort(), [`${WORK_DIR}/hello.txt`, `${WORK_DIR}/other.md`]);

    // The file is visible to commands and to the interpreter.
    const cat = await sbx.commands.run(`cat ${path}`);
    assert.deepEqual(cat.logs.stdout.map((m) => m.text), ["hello hybox"]);
    const py = await runCode(sbx, `open(${JSON.stringify(path)}).read()`, { language: "python" });
    assert.deepEqual(resultTexts(py.execution), ["'hello hybox\\n'"]);

    await sbx.files.deleteFiles([path]);
    const remaining = await sbx.files.search({ path: WORK_DIR, pattern: "*.txt" });
    assert.deepEqual(remaining, []);
    await expectApiStatus(sbx.files.readFile(path), [404]);
  });

  it("looks like Linux: users, /etc and owner names", async () => {
    const ex = await sbx.commands.run("id -u nobody; id -g nobody; test -r /etc/passwd && test -r /etc/os-release && echo etc");
    assert.deepEqual(ex.logs.stdout.map((m) => m.text), ["65534", "65534", "etc"]);
    const bad = await sbx.commands.run("id no-such-user-e2e");
    assert.equal(bad.exitCode, 1);
    if (WASM) {
      const os = await sbx.commands.run(". /etc/os-release; echo $ID; whoami; id -gn nobody");
      assert.deepEqual(os.logs.stdout.map((m) => m.text), ["hybox", "user", "nogroup"]);
    }
    const path = `${WORK_DIR}/owned.txt`;
    await sbx.files.writeFiles([{ path, data: "x", owner: "nobody", group: "nogroup" }]);
    const infos = await sbx.files.getFileInfo([path]);
    assert.equal(infos[path]?.owner, "nobody");
    assert.equal(infos[path]?.group, "nogroup");
    await sbx.files.deleteFiles([path]);
  });

  it("renews a sandbox on access (access.renew.extend.seconds)", async () => {
    const s = await Sandbox.create({
      connectionConfig: connection(),
      image: IMAGE,
      extensions: { ...EXTENSIONS, "access.renew.extend.seconds": "300" },
      metadata: { suite: "hybox-e2e-js", run: `${RUN_ID}-renew`, role: "renew" },
      timeoutSeconds: 60,
    });
    created.push(s);
    await s.commands.run("echo hi");
    const info = await s.getInfo();
    // Created with 60 s to live; traffic through the proxy route moved the
    // expiry to about 300 s after it (within the documented minute).
    const lifetime = (info.expiresAt.getTime() - info.createdAt.getTime()) / 1000;
    assert.ok(lifetime > 250, `expiresAt is ${lifetime}s after createdAt, want about 300s`);
    await s.kill();
  });

  it("refuses java and go contexts where they are missing", async () => {
    const t = await execdTarget(sbx);
    for (const language of ["java", "go"]) {
      const res = await fetch(`${t.base}/code/context`, {
        method: "POST",
        headers: { ...t.headers, "content-type": "application/json" },
        body: JSON.stringify({ language }),
      });
      const text = await res.text();
      assert.equal(res.status, 400, text);
      assert.match(text.toLowerCase(), WASM ? /container/ : /available/);
    }
  });

  it("keeps java and go state between cells", {
    skip: !WASM && LANG_IMAGE ? false : "container passes only, with HYBOX_E2E_LANG_IMAGE (an image with a JDK and Go) set",
  }, async () => {
    const s = await Sandbox.create({
      connectionConfig: connection(), image: LANG_IMAGE, extensions: EXTENSIONS, timeoutSeconds: 300,
      metadata: { suite: "hybox-e2e-js", run: `${RUN_ID}-langs`, role: "langs" },
    });
    created.push(s);
    const java = await createContext(s, "java");
    assert.equal((await runCode(s, "int x = 41;\nint twice(int n) { return 2 * n; }", java)).execution.error, undefined);
    assert.deepEqual(resultTexts((await runCode(s, "twice(x) - x + 1", java)).execution), ["42"]);
    const go = await createContext(s, "go");
    await runCode(s, 'import "fmt"\nfunc twice(n int) int { return 2 * n }', go);
    const out = await runCode(s, "fmt.Println(twice(21))", go);
    assert.equal(stdoutText(out.execution), "42\n");
    await s.kill();
  });

  it("mounts host and named volumes (readOnly, shared by two sandboxes)", {
    skip: HOST_DIR ? false : "HYBOX_E2E_HOST_DIR is not set: the server allows no host volume (scripts/e2e.sh sets it when it runs as root)",
  }, async () => {
    const claim = `e2e-js-${RUN_ID.slice(0, 8)}`;
    const name = `js-${RUN_ID.slice(0, 8)}.txt`;
    const meta = { suite: "hybox-e2e-js", run: `${RUN_ID}-volumes`, role: "volumes" };
    const a = await Sandbox.create({
      connectionConfig: connection(), image: IMAGE, extensions: EXTENSIONS, metadata: meta, timeoutSeconds: 300,
      volumes: [
        { name: "logs", host: { path: HOST_DIR }, mountPath: "/mnt/logs" },
        { name: "ro", host: { path: HOST_DIR }, mountPath: "/mnt/ro", readOnly: true },
        ...(NO_PVC ? [] : [{ name: "shared", pvc: { claimName: claim, deleteOnSandboxTermination: true }, mountPath: "/data" }]),
      ],
    });
    created.push(a);
    if (NO_PVC) console.log(`named (pvc) volumes left out: ${NO_PVC}`);
    const b = NO_PVC ? null : await Sandbox.create({
      connectionConfig: connection(), image: IMAGE, extensions: EXTENSIONS, metadata: meta, timeoutSeconds: 300,
      volumes: [{ name: "shared", pvc: { claimName: claim }, mountPath: "/shared" }],
    });
    if (b) created.push(b);
    const w = await a.commands.run(`echo from-a > /mnt/logs/${name}` + (NO_PVC ? "" : " && echo pvc > /data/p.txt"));
    assert.equal(w.exitCode ?? 0, 0, JSON.stringify(w.logs));
    assert.equal(readFileSync(`${HOST_DIR}/${name}`, "utf8"), "from-a\n", "the write reached the host directory");
    assert.equal(await a.files.readFile(`/mnt/ro/${name}`), "from-a\n", "the files API reads the read-only mount");
    const ro = await a.commands.run(`echo no > /mnt/ro/no-${name}`);
    assert.notEqual(ro.exitCode ?? (ro.error ? 1 : 0), 0, "a read-only volume refuses writes");
    if (b) {
      const cat = await b.commands.run("cat /shared/p.txt");
      assert.equal(stdoutText(cat).trim(), "pvc", "the second sandbox sees the named volume");
      await b.kill();
    }
    await a.kill();
  });

  it("routes opensandbox/code-interpreter images to wasm", {
    skip: WASM ? false : `wasm-only: this pass runs ${PASS}; the code-interpreter image routing is covered by the wasm pass`,
  }, async () => {
    const ciSbx = await secondSandbox();
    const info = await ciSbx.getInfo();
    assert.equal(info.status.state, "Running");
    assert.equal(info.image?.uri, "opensandbox/code-interpreter:latest");
    const ctx = await createContext(ciSbx, "python");
    await runCode(ciSbx, "x = 41", ctx);
    const r = await runCode(ciSbx, "import sys\n(x + 1, sys.platform)", ctx);
    assert.deepEqual(resultTexts(r.execution), ["(42, 'wasi')"]);
  });

  it("lists sandboxes by metadata and state", async () => {
    const other = await secondSandbox();
    const mine = await manager.listSandboxInfos({ metadata: { run: RUN_ID } });
    assert.deepEqual(mine.items.map((s) => s.id).sort(), [sbx.id, other.id].sort());
    assert.equal(mine.pagination?.totalItems, 2);
    assert.equal(mine.pagination?.page, 1);
    assert.equal(mine.pagination?.hasNextPage, false);

    const both = await manager.listSandboxInfos({ metadata: { run: RUN_ID, role: "default" } });
    assert.deepEqual(both.items.map((s) => s.id), [sbx.id]);

    const running = await manager.listSandboxInfos({ metadata: { run: RUN_ID }, states: ["Running"] });
    assert.equal(running.items.length, 2);
    const orStates = await manager.listSandboxInfos({ metadata: { run: RUN_ID }, states: ["Paused", "Running"] });
    assert.equal(orStates.items.length, 2);
    const paused = await manager.listSandboxInfos({ metadata: { run: RUN_ID }, states: ["Paused"] });
    assert.deepEqual(paused.items, []);
    const none = await manager.listSandboxInfos({ metadata: { run: "no-such-run" } });
    assert.deepEqual(none.items, []);

    const page = await manager.listSandboxInfos({ metadata: { run: RUN_ID }, pageSize: 1, page: 1 });
    assert.equal(page.items.length, 1);
    assert.equal(page.pagination?.hasNextPage, true);
    assert.equal(page.pagination?.totalPages, 2);
  });

  it("rejects a wrong API key with 401", async () => {
    const bad = SandboxManager.create({ connectionConfig: connection("definitely-wrong-key") });
    try {
      const err = await expectApiStatus(bad.listSandboxInfos({}), [401]);
      assert.equal(err.error?.code, "INVALID_API_KEY");
    } finally {
      await bad.close();
    }
  });

  it("kills a sandbox", async () => {
    const other = await secondSandbox();
    await other.kill();
    try {
      const info = await manager.getSandboxInfo(other.id);
      assert.equal(info.status.state, "Terminated");
    } catch (err) {
      assert.equal(err.statusCode, 404, `get after kill: ${err.message}`);
    }
    const running = await manager.listSandboxInfos({ metadata: { run: RUN_ID }, states: ["Running"] });
    assert.deepEqual(running.items.map((s) => s.id), [sbx.id]);
  });
});

// ---------------------------------------------------------------------------
// Egress policy and credential vault (sandbox port 18080), through the SDK's
// public API only: Sandbox.getEgressPolicy / patchEgressRules /
// deleteEgressRules and sandbox.credentialVault. No traffic leaves the
// machine: only the API is exercised here (enforcement is tested in Go).
// ---------------------------------------------------------------------------

// Egress sandboxes carry their own run tag so that the list tests above,
// which count the sandboxes tagged with RUN_ID, do not see them.
const EGRESS_RUN = `${RUN_ID}-egress`;
const POLICY = {
  defaultAction: "deny",
  egress: [
    { action: "allow", target: "api.example.com" },
    { action: "deny", target: "*.evil.example" },
  ],
};
const SECRET = `hybox-e2e-secret-${randomUUID()}`;
const SECRET2 = `hybox-e2e-rotated-${randomUUID()}`;
const CREDENTIAL = "api-token";
const BINDING = "api-bearer";
const BINDING_MATCH = { schemes: ["https"], ports: [443], hosts: ["api.example.com"], paths: ["/*"] };

function createEgressSandbox(role, opts = {}) {
  return Sandbox.create({
    connectionConfig: connection(),
    image: IMAGE,
    extensions: EXTENSIONS,
    metadata: { suite: "hybox-e2e-js", run: EGRESS_RUN, role },
    timeoutSeconds: 300,
    ...opts,
  });
}

/** Rules as plain {action, target} pairs, whatever else the server adds. */
function rulesOf(policy) {
  return (policy.egress ?? []).map((r) => ({ action: r.action, target: r.target }));
}

/** Assert that none of the given values (SDK results) mentions a secret. */
function assertNoSecret(what, ...values) {
  const text = JSON.stringify(values);
  for (const s of [SECRET, SECRET2]) {
    assert.ok(!text.includes(s), `${what} carries a credential value: ${text}`);
  }
}

describe(`hybox egress API through the OpenSandbox JS SDK (${PASS})`, () => {
  /** @type {Sandbox} networkPolicy + credentialProxy */
  let sbx;
  const created = [];
  // Every body the egress API answered, as the SDK received it from the wire
  // (observed through a wrapper around the global fetch the SDK calls); the
  // SDK sanitises vault state, so a leaked secret would only show here.
  const wire = [];
  const realFetch = globalThis.fetch;

  before(async () => {
    globalThis.fetch = async (input, init) => {
      const res = await realFetch(input, init);
      const url = typeof input === "string" ? input : input instanceof URL ? input.href : input.url;
      if (/\/(policy|credential-vault)(\/|\?|$)/.test(url)) {
        wire.push({ url, status: res.status, body: await res.clone().text() });
      }
      return res;
    };
    if (EGRESS_REFUSED) return;
    sbx = await createEgressSandbox("egress", { networkPolicy: POLICY, credentialProxy: { enabled: true } });
    created.push(sbx);
  });

  after(async () => {
    globalThis.fetch = realFetch;
    for (const s of created) {
      try {
        await s.kill();
      } catch {
        // already gone
      }
      await s.close();
    }
  });

  it("refuses a network policy where the runtime cannot enforce one", { skip: !EGRESS_REFUSED && "this pass enforces egress policies" }, async () => {
    for (const opts of [
      { networkPolicy: POLICY },
      { networkPolicy: { defaultAction: "deny", egress: [] }, credentialProxy: { enabled: true } },
    ]) {
      const err = await expectApiStatus(createEgressSandbox("egress-refused", opts), [400]);
      assert.equal(err.error?.code, "NOT_SUPPORTED", err.message);
      assert.ok(err.error?.message, "the refusal says why");
    }
  });

  it("reads, patches and deletes egress rules", { skip: EGRESS_SKIP }, async () => {
    const initial = await sbx.getEgressPolicy();
    assert.equal(initial.defaultAction, "deny");
    assert.deepEqual(rulesOf(initial), POLICY.egress);

    await sbx.patchEgressRules([{ action: "allow", target: "pypi.org" }]);
    const patched = await sbx.getEgressPolicy();
    assert.equal(patched.defaultAction, "deny", "a patch keeps defaultAction");
    assert.deepEqual(rulesOf(patched), [{ action: "allow", target: "pypi.org" }, ...POLICY.egress],
      "the new rule comes first, the others keep their order");

    // A rule for a target already present replaces it and takes priority.
    await sbx.patchEgressRules([{ action: "allow", target: "*.evil.example" }]);
    const overridden = await sbx.getEgressPolicy();
    assert.deepEqual(rulesOf(overridden), [
      { action: "allow", target: "*.evil.example" },
      { action: "allow", target: "pypi.org" },
      { action: "allow", target: "api.example.com" },
    ]);

    // Unknown targets are ignored.
    await sbx.deleteEgressRules(["*.evil.example", "pypi.org", "absent.example.org"]);
    const pruned = await sbx.getEgressPolicy();
    assert.equal(pruned.defaultAction, "deny", "a delete keeps defaultAction");
    assert.deepEqual(rulesOf(pruned), [{ action: "allow", target: "api.example.com" }]);

    const err = await expectApiStatus(sbx.patchEgressRules([{ action: "allow", target: "not a host!" }]), [400]);
    assert.ok(err.error?.code, "the error carries a code");
    const unchanged = await sbx.getEgressPolicy();
    assert.deepEqual(rulesOf(unchanged), [{ action: "allow", target: "api.example.com" }],
      "a refused patch changes nothing");
  });

  it("manages the credential vault without ever returning a secret", { skip: EGRESS_SKIP }, async () => {
    const vault = sbx.credentialVault;
    const results = [];

    // Nothing yet.
    await expectApiStatus(vault.get(), [404]);
    // A binding whose host the network policy does not allow is refused.
    await expectApiStatus(vault.create({
      credentials: [{ name: CREDENTIAL, source: { type: "inline", value: SECRET } }],
      bindings: [{
        name: BINDING,
        match: { ...BINDING_MATCH, hosts: ["not-allowed.example.org"] },
        auth: { type: "bearer", credential: CREDENTIAL },
      }],
    }), [400, 403, 409, 412, 422]);
    await expectApiStatus(vault.get(), [404]);

    const state = await vault.create({
      credentials: [{ name: CREDENTIAL, source: { type: "inline", value: SECRET } }],
      bindings: [{ name: BINDING, match: BINDING_MATCH, auth: { type: "bearer", credential: CREDENTIAL } }],
    });
    results.push(state);
    assert.equal(state.revision, 1);
    assert.deepEqual(state.credentials, [{ name: CREDENTIAL, sourceType: "inline", revision: 1 }]);
    assert.equal(state.bindings.length, 1);
    const binding = state.bindings[0];
    assert.equal(binding.name, BINDING);
    assert.equal(binding.revision, 1);
    assert.deepEqual(binding.match?.hosts, ["api.example.com"]);
    assert.deepEqual(binding.match?.schemes, ["https"]);
    assert.deepEqual(binding.match?.paths, ["/*"]);
    assert.equal(binding.auth?.type, "bearer");

    const got = await vault.get();
    results.push(got);
    assert.deepEqual(got, state);

    const creds = await vault.listCredentials();
    const cred = await vault.getCredential(CREDENTIAL);
    const bindings = await vault.listBindings();
    const one = await vault.getBinding(BINDING);
    results.push(creds, cred, bindings, one);
    assert.deepEqual(creds, state.credentials);
    assert.deepEqual(cred, state.credentials[0]);
    assert.deepEqual(bindings, state.bindings);
    assert.deepEqual(one, binding);
    await expectApiStatus(vault.getCredential("no-such-credential"), [404]);
    await expectApiStatus(vault.getBinding("no-such-binding"), [404]);

    const rotated = await vault.patch({
      expectedRevision: got.revision,
      credentials: { replace: [{ name: CREDENTIAL, source: { type: "inline", value: SECRET2 } }] },
    });
    results.push(rotated);
    assert.equal(rotated.revision, got.revision + 1);
    assert.equal(rotated.credentials.length, 1);
    assert.equal(rotated.credentials[0].name, CREDENTIAL);
    assert.equal(rotated.credentials[0].sourceType, "inline");
    assert.ok(rotated.credentials[0].revision > state.credentials[0].revision, "a replaced credential gets a new revision");
    assert.deepEqual(rotated.bindings.map((b) => b.name), [BINDING]);

    // A stale expectedRevision is refused and changes nothing.
    await expectApiStatus(vault.patch({
      expectedRevision: got.revision,
      credentials: { replace: [{ name: CREDENTIAL, source: { type: "inline", value: SECRET } }] },
    }), [409, 412]);
    const current = await vault.get();
    results.push(current);
    assert.deepEqual(current, rotated);

    assertNoSecret("credential vault results", ...results);
    const vaultBodies = wire.filter((w) => w.url.includes("/credential-vault"));
    assert.ok(vaultBodies.length >= results.length, `saw ${vaultBodies.length} credential-vault responses`);
    for (const w of vaultBodies) {
      assert.ok(!w.body.includes(SECRET) && !w.body.includes(SECRET2), `${w.url} (${w.status}) answered a credential value: ${w.body}`);
    }

    await vault.delete();
    await expectApiStatus(vault.get(), [404]);
    await expectApiStatus(vault.listCredentials(), [404]);
  });

  it("reports allow-all for a sandbox created without a network policy", async () => {
    const open = await createEgressSandbox("egress-open");
    created.push(open);
    const p = await open.getEgressPolicy();
    assert.equal(p.defaultAction, "allow");
    assert.deepEqual(p.egress ?? [], []);
    // The vault needs credentialProxy (and a network policy) at create.
    await expectApiStatus(open.credentialVault.create({
      credentials: [{ name: CREDENTIAL, source: { type: "inline", value: SECRET } }],
      bindings: [{ name: BINDING, match: BINDING_MATCH, auth: { type: "bearer", credential: CREDENTIAL } }],
    }), [400, 403, 409, 412]);
  });
});
