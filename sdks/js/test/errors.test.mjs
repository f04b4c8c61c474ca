import assert from "node:assert/strict";
import { test } from "node:test";
import {
  AuthenticationError,
  ConflictError,
  HyboxError,
  InvalidArgumentError,
  NotFoundError,
  NotSupportedError,
  RateLimitedError,
  Sandbox,
  TimeoutError,
  UnavailableError,
} from "@hybox/sdk";
import { eventually, limited, newSandbox } from "./util.mjs";

// Holds the limited server's only execution slot while f runs.
async function whileBusy(sb, f) {
  let started;
  const go = new Promise((r) => (started = r));
  const hold = sb.commands.run("echo started; sleep 1", { onStdout: () => started() });
  await go;
  try {
    return await f();
  } finally {
    await hold;
  }
}

test("each typed error comes from a real server's answer", async (t) => {
  const sb = await newSandbox(t);
  const lsb = await Sandbox.create(limited({ maxRetries: 0 }));
  t.after(() => lsb.kill());
  const cases = [
    ["not found", () => Sandbox.connect("00000000-0000-4000-8000-000000000000"), NotFoundError, 404, "SANDBOX_NOT_FOUND", false],
    ["authentication", () => Sandbox.list({ apiKey: "wrong" }), AuthenticationError, 401, "INVALID_API_KEY", false],
    ["invalid argument", () => Sandbox.create({ timeout: 5 }), InvalidArgumentError, 400, "INVALID_REQUEST", false],
    ["conflict", () => sb.resume(), ConflictError, 409, "INVALID_STATE", false],
    ["not supported", () => sb.commands.createPty(), NotSupportedError, 400, "NOT_SUPPORTED", false],
    ["unavailable", () => Sandbox.create(limited({ credentialProxy: { enabled: true }, networkPolicy: { defaultAction: "deny" } })), UnavailableError, 503, "UNAVAILABLE", true],
    ["rate limited", () => whileBusy(lsb, () => lsb.commands.run("echo refused")), RateLimitedError, 429, "TOO_MANY_EXECUTIONS", true],
    ["busy context", async () => {
      const ctx = await sb.code.createContext();
      let started;
      const go = new Promise((r) => (started = r));
      const p = sb.code.run("import time\nprint('started', flush=True)\ntime.sleep(1)", { context: ctx, onStdout: () => started() });
      await go;
      try { return await sb.code.run("1", { context: ctx }); } finally { await p; }
    }, ConflictError, 409, "CONTEXT_BUSY", false],
    ["missing file", () => sb.files.read("/nope"), NotFoundError, 404, "FILE_NOT_FOUND", false],
  ];
  for (const [name, call, cls, status, code, retryable] of cases) {
    await t.test(name, async () => {
      await assert.rejects(call(), (e) => {
        assert.ok(e instanceof cls, `${name}: ${e?.name}: ${e?.message}`);
        assert.ok(e instanceof HyboxError);
        assert.equal(e.status, status, e.message);
        assert.equal(e.code, code, e.message);
        assert.equal(e.isRetryable, retryable);
        assert.match(e.message, new RegExp(code));
        if (status < 500 || status === 503) assert.match(e.requestId, /\S/, "X-Request-ID is kept");
        if (e instanceof RateLimitedError) assert.ok(e.retryAfter >= 0);
        return true;
      });
    });
  }
  await t.test("timeout: a call's own deadline", async () => {
    await assert.rejects(sb.commands.run("sleep 3", { requestTimeoutMs: 200 }), (e) => e instanceof TimeoutError && e instanceof HyboxError);
  });
});

test("a 429 is retried until the slot is free", async (t) => {
  const lsb = await Sandbox.create(limited({ maxRetries: 50, maxRetryWaitMs: 100 }));
  t.after(() => lsb.kill());
  const start = Date.now();
  const r = await whileBusy(lsb, () => lsb.commands.run("echo second"));
  assert.equal(r.stdout, "second\n");
  assert.ok(Date.now() - start >= 300, `ran after ${Date.now() - start} ms: not held back`);
});

test("aborting a wait between retries stops the call", async (t) => {
  const lsb = await Sandbox.create(limited({ maxRetries: 50, maxRetryWaitMs: 100 }));
  t.after(() => lsb.kill());
  const ac = new AbortController();
  await whileBusy(lsb, async () => {
    setTimeout(() => ac.abort(), 150);
    await assert.rejects(lsb.commands.run("echo x", { signal: ac.signal }), { name: "AbortError" });
  });
  assert.ok(await eventually(async () => (await lsb.commands.run("echo free")).exitCode === 0));
});
