// The SDK's own retry policy, through a small proxy in front of the real
// server that answers the first requests with a retryable status.
import assert from "node:assert/strict";
import { createServer, request as httpRequest } from "node:http";
import { test } from "node:test";
import { RateLimitedError, Sandbox, UnavailableError } from "@hybox/sdk";

/** A proxy to the real server; `fail(n, status, retryAfter)` makes the next n requests fail. */
async function proxy(t) {
  const upstream = new URL(process.env.HYBOX_DOMAIN);
  const state = { left: 0, status: 429, retryAfter: undefined, calls: 0, methods: [] };
  const srv = createServer((req, res) => {
    state.calls++;
    state.methods.push(req.method);
    if (state.left > 0) {
      state.left--;
      const h = { "Content-Type": "application/json", "X-Request-ID": "proxy-" + state.calls };
      if (state.retryAfter !== undefined) h["Retry-After"] = state.retryAfter;
      res.writeHead(state.status, h);
      res.end(JSON.stringify({ code: state.status === 429 ? "TOO_MANY_EXECUTIONS" : "UNAVAILABLE", message: "from the test proxy" }));
      return;
    }
    const up = httpRequest({ host: upstream.hostname, port: upstream.port, method: req.method, path: req.url, headers: { ...req.headers, host: upstream.host } }, (ur) => {
      res.writeHead(ur.statusCode, ur.headers);
      ur.pipe(res);
    });
    up.on("error", () => res.destroy());
    req.pipe(up);
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  t.after(() => new Promise((r) => srv.close(r)));
  const domain = `http://127.0.0.1:${srv.address().port}`;
  return {
    domain,
    state,
    fail(n, status = 429, retryAfter = "0") {
      Object.assign(state, { left: n, status, retryAfter, calls: 0, methods: [] });
    },
  };
}

test("retries: 429 twice then success, bounded, off, idempotent only for 503", async (t) => {
  const p = await proxy(t);
  const list = (opts = {}) => Sandbox.list({ domain: p.domain, ...opts });

  p.fail(2, 429, "0");
  assert.ok(Array.isArray((await list()).items));
  assert.equal(p.state.calls, 3, "two 429s and the success");

  p.fail(10, 429, "0");
  await assert.rejects(list({ maxRetries: 2 }), (e) => e instanceof RateLimitedError && e.retryAfter === 0 && e.requestId === "proxy-3");
  assert.equal(p.state.calls, 3, "bounded: 1 + 2 retries");

  p.fail(1, 429, "0");
  await assert.rejects(list({ maxRetries: 0 }), RateLimitedError);
  assert.equal(p.state.calls, 1, "retries off");

  p.fail(1, 429, "1");
  const start = Date.now();
  await list();
  assert.ok(Date.now() - start >= 900, `Retry-After: 1 waited ${Date.now() - start} ms`);

  p.fail(1, 503, undefined);
  await list();
  assert.equal(p.state.calls, 2, "503 on GET is retried");

  p.fail(1, 503, undefined);
  await assert.rejects(Sandbox.create({ domain: p.domain }), UnavailableError);
  assert.deepEqual(p.state.methods, ["POST"], "503 on POST is not retried");

  p.fail(1, 429, "0");
  const sb = await Sandbox.create({ domain: p.domain });
  await Sandbox.kill(sb.id); // directly, not through the proxy
  assert.deepEqual(p.state.methods, ["POST", "POST"], "429 on POST is retried: the server did nothing");

  p.fail(1, 429, "0");
  await assert.rejects(Sandbox.list({ domain: p.domain, maxRetryWaitMs: 0, maxRetries: 0 }), (e) => e.isRetryable === true);
});
