// make bench-sdk-js: the TypeScript SDK against a real `hybox serve`, and the
// same requests made with raw fetch, to show what the SDK itself costs.
// Prints a table; timings never fail anything.
//
//   create → first result: Sandbox.create() then commands.run("echo hi")
//   warm 1+1:              code.run("1+1") in a warm Python context
//   overhead:              SDK p50 − raw fetch p50, for the same requests
//                          (a warm `1+1`, and execd's GET /ping)
//
// Environment: HYBOX_BIN, HYBOX_GUEST_DIR, BENCH_N (default 60),
// HYBOX_SDK_CONTAINERD (adds the runc rows).
import { cpus } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { startServer } from "../test/harness.mjs";

const pkgDir = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const root = resolve(pkgDir, "../..");
const N = Number(process.env.BENCH_N || 60);
const server = await startServer({
  bin: process.env.HYBOX_BIN || join(root, "bin", "hybox"),
  guestDir: process.env.HYBOX_GUEST_DIR || join(root, "build", "guests"),
  cacheDir: join(root, "build", "js-sdk-wazero-cache"),
  containerd: process.env.HYBOX_SDK_CONTAINERD || "",
});
const { Sandbox } = await import("../dist/node.js");
const conn = { domain: server.url, apiKey: server.apiKey };

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)];
};
const now = () => performance.now();

// Raw fetch: the protocol by hand, as little work as possible.
const api = (path, init = {}) =>
  fetch(server.url + "/v1" + path, { ...init, headers: { "OPEN-SANDBOX-API-KEY": server.apiKey, "Content-Type": "application/json", ...init.headers } });
async function rawStream(url, headers, body) {
  const r = await fetch(url, { method: "POST", headers: { ...headers, "Content-Type": "application/json" }, body: JSON.stringify(body) });
  const text = await r.text();
  if (!text.includes('"execution_complete"')) throw new Error("raw: no execution_complete: " + text.slice(0, 200));
  return text;
}
async function rawCreateFirst(image) {
  const c = await (await api("/sandboxes", { method: "POST", body: JSON.stringify({ image: { uri: image }, ...(image.startsWith("wasm") ? {} : { extensions: { "hybox.io/runtime": "runc" } }) }) })).json();
  const ep = await (await api(`/sandboxes/${c.id}/endpoints/44772`)).json();
  await rawStream("http://" + ep.endpoint + "/command", ep.headers, { command: "echo hi" });
  return c.id;
}

async function createFirst(label, image, n) {
  const sdk = [];
  const raw = [];
  const extra = image.startsWith("wasm") ? {} : { extensions: { "hybox.io/runtime": "runc" } };
  for (let i = 0; i < n; i++) {
    let t = now();
    const sb = await Sandbox.create({ ...conn, image, ...extra });
    const r = await sb.commands.run("echo hi");
    sdk.push(now() - t);
    if (r.stdout !== "hi\n") throw new Error("unexpected output " + r.stdout);
    await sb.kill();
    t = now();
    const id = await rawCreateFirst(image);
    raw.push(now() - t);
    await api(`/sandboxes/${id}`, { method: "DELETE" });
  }
  return { label, sdk, raw };
}

async function warm(n) {
  const sb = await Sandbox.create(conn);
  const ctx = await sb.code.createContext({ language: "python" });
  const ep = await sb.endpoint(44772);
  const sdk = [];
  const raw = [];
  const sdkPing = [];
  const rawPing = [];
  for (let i = 0; i < 20; i++) await sb.code.run("1+1", { context: ctx }); // warm up both paths
  for (let i = 0; i < 20; i++) await rawStream(ep.url + "/code", ep.headers, { context: { id: ctx.id }, code: "1+1" });
  for (let i = 0; i < n; i++) {
    let t = now();
    const x = await sb.code.run("1+1", { context: ctx });
    sdk.push(now() - t);
    if (x.text !== "2") throw new Error("unexpected result " + x.text);
    t = now();
    await rawStream(ep.url + "/code", ep.headers, { context: { id: ctx.id }, code: "1+1" });
    raw.push(now() - t);
    t = now();
    await sb.ping();
    sdkPing.push(now() - t);
    t = now();
    const r = await fetch(ep.url + "/ping", { headers: ep.headers });
    await r.arrayBuffer();
    rawPing.push(now() - t);
  }
  await sb.kill();
  return { sdk, raw, sdkPing, rawPing };
}

const f = (x) => x.toFixed(2) + " ms";
try {
  const rows = [];
  const cf = await createFirst("wasm", "wasm://default", N);
  rows.push(["create → first command result, wasm, p50 / p99", `${f(pct(cf.sdk, 50))} / ${f(pct(cf.sdk, 99))}`, `${f(pct(cf.raw, 50))} / ${f(pct(cf.raw, 99))}`, "p50 < 10 ms"]);
  if (process.env.HYBOX_SDK_CONTAINERD) {
    const rc = await createFirst("runc", "localhost/hybox/python:3-bookworm", Math.min(N, 10));
    rows.push(["create → first command result, runc, p50 / p99", `${f(pct(rc.sdk, 50))} / ${f(pct(rc.sdk, 99))}`, `${f(pct(rc.raw, 50))} / ${f(pct(rc.raw, 99))}`, ""]);
  } else {
    rows.push(["create → first command result, runc", "skipped: no containerd (HYBOX_SDK_CONTAINERD)", "", ""]);
  }
  const w = await warm(N * 5);
  rows.push(["warm `1+1` (Python), p50 / p99", `${f(pct(w.sdk, 50))} / ${f(pct(w.sdk, 99))}`, `${f(pct(w.raw, 50))} / ${f(pct(w.raw, 99))}`, ""]);
  rows.push(["SDK overhead over raw fetch, warm `1+1`, p50", f(pct(w.sdk, 50) - pct(w.raw, 50)), "", "< 0.3 ms"]);
  rows.push(["SDK overhead over raw fetch, GET /ping, p50", f(pct(w.sdkPing, 50) - pct(w.rawPing, 50)), `(ping: ${f(pct(w.sdkPing, 50))} SDK, ${f(pct(w.rawPing, 50))} raw)`, "< 0.3 ms"]);
  rows.push(["SDK overhead over raw fetch, create → first result, p50", f(pct(cf.sdk, 50) - pct(cf.raw, 50)), "", ""]);
  console.log(`@hybox/sdk bench: node ${process.version}, ${cpus().length} × ${cpus()[0]?.model ?? "?"}, N=${N} (warm: ${N * 5})`);
  console.log("| what | SDK | raw fetch | target |");
  console.log("|---|---|---|---|");
  for (const r of rows) console.log(`| ${r.join(" | ")} |`);
} finally {
  await server.stop();
}
