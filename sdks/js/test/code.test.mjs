import assert from "node:assert/strict";
import { test } from "node:test";
import { Result, run, ConflictError } from "@hybox/sdk";
import { eventually, newSandbox } from "./util.mjs";

test("code.run: results, logs, error with traceback, execution count", async (t) => {
  const sb = await newSandbox(t);
  const x = await sb.code.run("print('hello')\nsquares = [n * n for n in range(5)]\nsum(squares)");
  assert.equal(x.text, "30");
  assert.ok(x.results[0] instanceof Result);
  assert.equal(x.results[0].data["text/plain"], "30");
  assert.deepEqual(x.logs.stdout.join(""), "hello\n");
  assert.equal(x.error, undefined);
  assert.ok(x.executionCount >= 1);
  const n = x.executionCount;
  const e = await sb.code.run("def f():\n    raise ValueError('bad')\nf()");
  assert.equal(e.error.name, "ValueError");
  assert.equal(e.error.value, "bad");
  assert.ok(e.error.traceback.join("").includes("ValueError"), e.error.traceback.join(""));
  assert.equal(e.executionCount, n + 1);
  const js = await sb.code.run("const a = 20; a + 22", { language: "javascript" });
  assert.equal(js.text, "42");
});

test("typescript and bash contexts keep state; a TypeScript error names its line", async (t) => {
  const sb = await newSandbox(t);
  const ts = await sb.code.createContext({ language: "typescript" });
  assert.equal((await sb.code.run("interface P { n: number }\nconst p: P = { n: 20 }", { context: ts })).error, undefined);
  assert.equal((await sb.code.run("p.n + 22", { context: ts })).text, "42");
  const e = (await sb.code.run("type T = string\n\nthrow new RangeError('far')", { context: ts })).error;
  assert.equal(e?.name, "RangeError");
  assert.ok(e.traceback.some((l) => l.includes(":3")), e.traceback.join("\n"));
  const sh = await sb.code.createContext({ language: "bash" });
  await sb.code.run("N=41; cd /tmp", { context: sh });
  assert.equal((await sb.code.run("echo $((N + 1)) $PWD", { context: sh })).logs.stdout.join(""), "42 /tmp\n");
  const langs = new Set((await sb.code.listContexts()).map((c) => c.language));
  assert.ok(langs.has("typescript") && langs.has("bash"), [...langs].join());
});

test("results expose every MIME type", async (t) => {
  const sb = await newSandbox(t);
  const x = await sb.code.run(
    "class Rich:\n" +
      "    def _repr_html_(self): return '<b>rich</b>'\n" +
      "    def _repr_markdown_(self): return '**rich**'\n" +
      "    def __repr__(self): return 'Rich()'\n" +
      "Rich()",
  );
  const r = x.results.at(-1);
  assert.equal(r.text, "Rich()");
  assert.equal(r.html, "<b>rich</b>");
  assert.equal(r.markdown, "**rich**");
  assert.deepEqual(r.formats().sort(), ["text/html", "text/markdown", "text/plain"]);
  assert.deepEqual(r.toJSON(), { "text/plain": "Rich()", "text/html": "<b>rich</b>", "text/markdown": "**rich**" });
});

test("callbacks and async iterator see events as they arrive", async (t) => {
  const sb = await newSandbox(t);
  const got = { out: [], err: [], results: [], errors: [] };
  const x = await sb.code.run("import sys\nprint('a')\nprint('b', file=sys.stderr)\n6 * 7", {
    onStdout: (s) => got.out.push(s),
    onStderr: (s) => got.err.push(s),
    onResult: (r) => got.results.push(r.text),
    onError: (e) => got.errors.push(e.name),
  });
  assert.equal(got.out.join(""), "a\n");
  assert.equal(got.err.join(""), "b\n");
  assert.deepEqual(got.results, ["42"]);
  await sb.code.run("raise KeyError('k')", { onError: (e) => got.errors.push(e.name) });
  assert.deepEqual(got.errors, ["KeyError"]);
  assert.equal(x.text, "42");

  const types = [];
  let out = "";
  for await (const ev of sb.code.stream("print(1)\n2")) {
    if (ev.type === "stdout") out += ev.text;
    else types.push(ev.type);
  }
  assert.equal(out, "1\n");
  assert.deepEqual(types.filter((x) => x !== "ping" && x !== "status" && x !== "execution_count"), ["init", "result", "execution_complete"]);
});

test("contexts: create, run in, list, delete", async (t) => {
  const sb = await newSandbox(t);
  const ctx = await sb.code.createContext({ language: "python" });
  assert.equal(ctx.language, "python");
  await sb.code.run("v = 'kept'", { context: ctx });
  assert.equal((await sb.code.run("v", { context: ctx.id })).text, "'kept'");
  assert.equal((await sb.code.run("'v' in globals()")).text, "False", "the default context is another one");
  const js = await sb.code.createContext({ language: "javascript" });
  const all = (await sb.code.listContexts()).map((c) => c.id);
  assert.ok(all.includes(ctx.id) && all.includes(js.id), all.join());
  const py = (await sb.code.listContexts({ language: "python" })).map((c) => c.id);
  assert.ok(py.includes(ctx.id) && !py.includes(js.id), py.join());
  await sb.code.deleteContext(ctx);
  await sb.code.deleteContext(js.id);
  assert.ok(!(await sb.code.listContexts()).some((c) => c.id === ctx.id));
  await assert.rejects(sb.code.run("1", { context: ctx.id }), { name: "NotFoundError" });
});

test("interrupt and abort stop code on the server", async (t) => {
  const sb = await newSandbox(t);
  const ctx = await sb.code.createContext({ language: "python" });
  // interrupt by execution id
  let id = "";
  const p = sb.code.run("import time\nwhile True:\n    time.sleep(0.01)", {
    context: ctx,
    onEvent: (ev) => {
      if (ev.type === "init") id = ev.text;
    },
  });
  await eventually(() => id);
  await assert.rejects(sb.code.run("1", { context: ctx }), ConflictError, "the context is busy while the loop runs");
  await sb.code.interrupt(id);
  const x = await p;
  assert.ok(x.error, "an interrupted execution carries an error");

  // abort: the context is free again soon after, so the loop stopped
  const ac = new AbortController();
  const q = sb.code.run("import time\nprint('go', flush=True)\nwhile True:\n    time.sleep(0.01)", {
    context: ctx,
    signal: ac.signal,
    onStdout: () => ac.abort(),
  });
  await assert.rejects(q, { name: "AbortError" });
  const free = await eventually(async () => {
    try {
      return (await sb.code.run("'free'", { context: ctx })).text;
    } catch (e) {
      if (e instanceof ConflictError) return undefined;
      throw e;
    }
  });
  assert.equal(free, "'free'");
});

test("code timeout: the server stops the execution", async (t) => {
  const sb = await newSandbox(t);
  const start = Date.now();
  const x = await sb.code.run("while True:\n    pass", { timeoutMs: 300 });
  assert.ok(Date.now() - start < 10_000);
  assert.equal(x.error?.name, "TimeoutError");
});

test("run: one-shot code without a sandbox", async () => {
  const x = await run("print('one')\n1 + 1", { language: "python" });
  assert.equal(x.text, "2");
  assert.equal(x.logs.stdout.join(""), "one\n");
  const out = [];
  const js = await run("console.log('js'); 40 + 2", { language: "javascript", onStdout: (s) => out.push(s) });
  assert.equal(js.text, "42");
  assert.match(out.join(""), /js/);
  const bad = await run("1/0");
  assert.equal(bad.error?.name, "ZeroDivisionError");
  await assert.rejects(run("1", { language: "cobol" }), { name: "InvalidArgumentError" });
});
