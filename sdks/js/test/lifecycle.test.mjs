import assert from "node:assert/strict";
import { test } from "node:test";
import { Sandbox, NotFoundError } from "@hybox/sdk";
import { newSandbox } from "./util.mjs";

test("create, getInfo, connect, list with filters, kill", async (t) => {
  const tag = "t" + Date.now();
  const sb = await newSandbox(t, { metadata: { suite: "js", tag }, timeout: 600 });
  assert.match(sb.id, /^[0-9a-f-]{36}$/);
  assert.equal(sb.info?.metadata?.tag, tag);
  const info = await sb.getInfo();
  assert.equal(info.status.state, "Running");
  assert.equal(info.image.uri, "wasm://default");

  const same = await Sandbox.connect(sb.id);
  assert.equal(same.id, sb.id);
  assert.equal((await same.commands.run("echo connected")).stdout, "connected\n");

  const other = await newSandbox(t, { metadata: { suite: "js", tag: tag + "-other" } });
  const page = await Sandbox.list({ metadata: { tag } });
  assert.deepEqual(page.items.map((s) => s.id), [sb.id]);
  const running = await Sandbox.list({ states: ["Running"], metadata: { suite: "js" }, pageSize: 100 });
  const ids = running.items.map((s) => s.id);
  assert.ok(ids.includes(sb.id) && ids.includes(other.id), `list by state: ${ids}`);
  const paged = await Sandbox.list({ metadata: { suite: "js" }, page: 1, pageSize: 1 });
  assert.equal(paged.items.length, 1);
  assert.equal(paged.pagination.pageSize, 1);
  assert.ok(paged.pagination.totalItems >= 2);

  await Sandbox.kill(other.id);
  await assert.rejects(Sandbox.connect(other.id), NotFoundError);
  await sb.kill();
  await assert.rejects(sb.getInfo(), NotFoundError);
});

test("pause and resume", async (t) => {
  const sb = await newSandbox(t);
  await sb.code.run("kept = 7");
  await sb.pause();
  const paused = await sb.getInfo();
  assert.ok(["Pausing", "Paused"].includes(paused.status.state), paused.status.state);
  await sb.resume();
  for (let i = 0; i < 100 && (await sb.getInfo()).status.state !== "Running"; i++) await new Promise((r) => setTimeout(r, 20));
  assert.equal((await sb.code.run("kept")).text, "7");
});

test("setTimeout, renew, patchMetadata", async (t) => {
  const sb = await newSandbox(t, { timeout: 120 });
  const before = Date.now();
  const exp = await sb.setTimeout(3600);
  assert.ok(Math.abs(exp.getTime() - (before + 3600_000)) < 5000, `expiry ${exp.toISOString()}`);
  const info = await sb.getInfo();
  assert.equal(new Date(info.expiresAt).getTime(), exp.getTime());
  const at = new Date(Date.now() + 7200_000);
  assert.ok(Math.abs((await sb.renew(at)).getTime() - at.getTime()) < 1000);
  const patched = await sb.patchMetadata({ a: "1", b: "2" });
  assert.equal(patched.metadata.a, "1");
  const removed = await sb.patchMetadata({ a: null });
  assert.equal(removed.metadata.a, undefined);
  assert.equal(removed.metadata.b, "2");
});

test("endpoint: URL and headers of a sandbox port, cached", async (t) => {
  const sb = await newSandbox(t);
  const ep = await sb.endpoint(44772);
  assert.match(ep.url, /^http:\/\/127\.0\.0\.1:\d+\/v1\/sandboxes\/[0-9a-f-]+\/proxy\/44772$/);
  assert.ok(ep.headers["X-EXECD-ACCESS-TOKEN"], JSON.stringify(ep.headers));
  const resp = await fetch(ep.url + "/ping", { headers: ep.headers });
  assert.equal(resp.status, 200);
  assert.deepEqual(await sb.endpoint(44772), ep);
  await sb.ping();
  const m = await sb.metrics();
  assert.ok(m.cpu_count > 0 && m.timestamp > 0);
});

test("connection from HYBOX_* falls back to OPEN_SANDBOX_*", async (t) => {
  const saved = { d: process.env.HYBOX_DOMAIN, k: process.env.HYBOX_API_KEY };
  t.after(() => {
    process.env.HYBOX_DOMAIN = saved.d;
    process.env.HYBOX_API_KEY = saved.k;
    delete process.env.OPEN_SANDBOX_DOMAIN;
    delete process.env.OPEN_SANDBOX_API_KEY;
  });
  delete process.env.HYBOX_DOMAIN;
  delete process.env.HYBOX_API_KEY;
  process.env.OPEN_SANDBOX_DOMAIN = saved.d.replace(/^http:\/\//, ""); // no scheme means http
  process.env.OPEN_SANDBOX_API_KEY = saved.k;
  const page = await Sandbox.list({ pageSize: 1 });
  assert.ok(Array.isArray(page.items));
  process.env.HYBOX_API_KEY = "wrong"; // HYBOX_* wins
  await assert.rejects(Sandbox.list(), { name: "AuthenticationError" });
});

test("fork: copies with the variables and files, independent of the source", async (t) => {
  const sb = await newSandbox(t, { metadata: { suite: "js" } });
  await sb.code.run("x = 1\nopen('/workspace/f', 'w').write('src')");
  const forks = await sb.fork({ count: 2, metadata: { copy: "yes" } });
  assert.equal(forks.length, 2);
  t.after(() => Promise.all(forks.map((f) => f.kill().catch(() => {}))));
  for (const f of forks) {
    assert.equal(f.info?.metadata?.copy, "yes");
    assert.equal(f.info?.metadata?.suite, "js");
  }
  await forks[0].code.run("x = 2");
  assert.equal((await sb.code.run("(x, open('/workspace/f').read())")).text, "(1, 'src')");
  assert.equal((await forks[1].code.run("x")).text, "1");
  assert.equal((await forks[0].code.run("x")).text, "2");
});
