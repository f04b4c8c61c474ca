import assert from "node:assert/strict";
import { test } from "node:test";
import { CommandExitError, TimeoutError } from "@hybox/sdk";
import { eventually, newSandbox } from "./util.mjs";

test("foreground: stdout, stderr, exit code as data, cwd, envs", async (t) => {
  const sb = await newSandbox(t);
  const r = await sb.commands.run("echo out; echo err >&2; exit 3");
  assert.equal(r.stdout, "out\n");
  assert.equal(r.stderr, "err\n");
  assert.equal(r.exitCode, 3);
  assert.equal(r.error?.name, "CommandExecError");
  assert.match(r.id, /\S/);
  const ok = await sb.commands.run("mkdir -p /work && cd /work && pwd");
  assert.equal(ok.exitCode, 0);
  assert.equal(ok.error, undefined);
  const env = await sb.commands.run("echo $GREETING; pwd", { envs: { GREETING: "hi" }, cwd: "/work" });
  assert.equal(env.stdout, "hi\n/work\n");
});

test("throwOnError turns a non-zero exit into a CommandExitError", async (t) => {
  const sb = await newSandbox(t);
  await assert.rejects(sb.commands.run("echo partial; exit 2", { throwOnError: true }), (e) => {
    assert.ok(e instanceof CommandExitError);
    assert.equal(e.exitCode, 2);
    assert.equal(e.stdout, "partial\n");
    assert.equal(e.isRetryable, false);
    return true;
  });
  assert.equal((await sb.commands.run("true", { throwOnError: true })).exitCode, 0);
});

test("streaming: a slowly printing command is seen line by line before it ends", async (t) => {
  const sb = await newSandbox(t);
  const seen = [];
  const start = Date.now();
  const r = await sb.commands.run("for i in 1 2 3; do echo line$i; sleep 0.4; done", {
    onStdout: (line) => seen.push([line, Date.now() - start]),
  });
  const end = Date.now() - start;
  assert.deepEqual(seen.map((s) => s[0]), ["line1", "line2", "line3"]);
  assert.ok(seen[0][1] < end - 600, `first line at ${seen[0][1]} ms, end at ${end} ms`);
  assert.ok(seen[1][1] - seen[0][1] >= 250, `lines ${seen[0][1]} and ${seen[1][1]} ms arrived together`);
  assert.equal(r.stdout, "line1\nline2\nline3\n");

  // The same as an async iterator.
  const types = [];
  let firstAt = 0;
  const t0 = Date.now();
  for await (const ev of sb.commands.stream("echo a; sleep 0.5; echo b")) {
    types.push(ev.type === "stdout" ? ev.text : ev.type);
    if (ev.type === "stdout" && !firstAt) firstAt = Date.now() - t0;
  }
  assert.deepEqual(types.filter((x) => x !== "ping"), ["init", "a", "b", "execution_complete"]);
  assert.ok(firstAt < Date.now() - t0 - 300, `first line at ${firstAt} ms`);
});

test("abort: aborting a command stops it on the server", async (t) => {
  const sb = await newSandbox(t);
  const ac = new AbortController();
  let id = "";
  const p = sb.commands.run("i=0; while true; do i=$((i+1)); echo $i > /tmp/count; echo tick; sleep 0.05; done", {
    signal: ac.signal,
    onEvent: (ev) => {
      if (ev.type === "init") id = ev.text;
    },
    onStdout: () => ac.abort(),
  });
  await assert.rejects(p, { name: "AbortError" });
  assert.ok(id);
  const st = await eventually(async () => {
    const s = await sb.commands.connect(id).status();
    return s.running ? undefined : s;
  });
  assert.ok(st && !st.running, "the command still runs after abort");
  const n1 = await sb.files.read("/tmp/count");
  await new Promise((r) => setTimeout(r, 400));
  assert.equal(await sb.files.read("/tmp/count"), n1, "the loop kept writing after abort");

  // Leaving a stream's loop early kills the command too.
  let sid = "";
  for await (const ev of sb.commands.stream("while true; do echo x; sleep 0.05; done")) {
    if (ev.type === "init") sid = ev.text;
    if (ev.type === "stdout") break;
  }
  const st2 = await eventually(async () => !(await sb.commands.connect(sid).status()).running);
  assert.ok(st2, "the command still runs after the loop ended");
});

test("timeouts: the server's limit and the call's deadline", async (t) => {
  const sb = await newSandbox(t);
  const start = Date.now();
  const r = await sb.commands.run("echo started; sleep 5; echo never", { timeoutMs: 300 });
  assert.ok(Date.now() - start < 4000, `took ${Date.now() - start} ms`);
  assert.equal(r.stdout, "started\n");
  assert.notEqual(r.exitCode, 0, "a command stopped by its timeout did not succeed");
  assert.ok(r.error, "a timed-out command carries an error");

  let id = "";
  await assert.rejects(
    sb.commands.run("sleep 5", { requestTimeoutMs: 300, onEvent: (ev) => ev.type === "init" && (id = ev.text) }),
    (e) => e instanceof TimeoutError,
  );
  assert.ok(await eventually(async () => !(await sb.commands.connect(id).status()).running), "the command outlived the call's deadline");
});

test("background: handle with status, logs, wait, kill", async (t) => {
  const sb = await newSandbox(t);
  const h = await sb.commands.run("echo one; sleep 0.3; echo two", { background: true });
  assert.match(h.id, /\S/);
  const st = await h.wait();
  assert.equal(st.running, false);
  assert.equal(st.exit_code, 0);
  const logs = await h.logs();
  assert.equal(logs.text, "one\ntwo\n");
  assert.equal(logs.cursor, 8);
  assert.equal((await h.logs(logs.cursor)).text, "");

  const long = await sb.commands.run("sleep 30", { background: true });
  assert.equal((await long.status()).running, true);
  await long.kill();
  const end = await long.wait();
  assert.equal(end.running, false);
  assert.notEqual(end.exit_code, 0);
  const byId = sb.commands.connect(long.id);
  assert.equal((await byId.status()).id, long.id);
});

test("sessions keep cwd and environment between runs", async (t) => {
  const sb = await newSandbox(t);
  const s = await sb.commands.createSession({ envs: { A: "1" } });
  await s.run("mkdir -p /tmp/s && cd /tmp/s && export B=2");
  const r = await s.run("pwd; echo $A$B");
  assert.equal(r.stdout, "/tmp/s\n12\n");
  const lines = [];
  await s.run("echo x; echo y", { onStdout: (l) => lines.push(l) });
  assert.deepEqual(lines, ["x", "y"]);
  assert.equal((await s.run("exit 4")).exitCode, 4);
  await s.close();
  await assert.rejects(s.run("true"), { name: "NotFoundError" });
});

test("abort right after sending (before the id is known) stops the command and the code", async (t) => {
  const sb = await newSandbox(t);
  await sb.ping();
  const ac = new AbortController();
  const p = sb.commands.run("sleep 1; echo x > /tmp/cmd-ran", { signal: ac.signal });
  setTimeout(() => ac.abort(), 2);
  await assert.rejects(p, { name: "AbortError" });
  const ac2 = new AbortController();
  const q = sb.code.run("import time\ntime.sleep(1)\nopen('/tmp/code-ran', 'w').write('x')", { signal: ac2.signal });
  setTimeout(() => ac2.abort(), 2);
  await assert.rejects(q, { name: "AbortError" });
  await new Promise((r) => setTimeout(r, 1800));
  assert.equal(await sb.files.exists("/tmp/cmd-ran"), false, "the command ran to its end");
  assert.equal(await sb.files.exists("/tmp/code-ran"), false, "the code ran to its end");
  // an already aborted signal sends nothing
  await assert.rejects(sb.commands.run("echo x > /tmp/never", { signal: AbortSignal.abort() }), { name: "AbortError" });
  assert.equal(await sb.files.exists("/tmp/never"), false);
});

test("commands.kill by id", async (t) => {
  const sb = await newSandbox(t);
  const h = await sb.commands.run("sleep 30", { background: true });
  await sb.commands.kill(h.id);
  const st = await h.wait();
  assert.equal(st.running, false);
  await assert.rejects(sb.commands.kill("no-such-command"), { name: "NotFoundError" });
});
