// Terminals are a container feature: this test runs only with containers.
import assert from "node:assert/strict";
import { test } from "node:test";
import { newSandbox, noContainers } from "./util.mjs";

test("pty: sendInput, resize, output, kill (container sandbox)", { skip: noContainers }, async (t) => {
  const sb = await newSandbox(t, { image: "localhost/hybox/python:3-bookworm", extensions: { "hybox.io/runtime": "runc" } });
  const pty = await sb.commands.createPty({ command: "bash", cols: 80, rows: 24 });
  let out = "";
  const dec = new TextDecoder();
  const reading = (async () => {
    for await (const chunk of pty.output()) out += dec.decode(chunk, { stream: true });
  })();
  pty.resize(100, 30);
  pty.sendInput("stty size; echo pty-$((20+22))\n");
  for (let i = 0; i < 100 && !(out.includes("30 100") && out.includes("pty-42")); i++) await new Promise((r) => setTimeout(r, 50));
  assert.match(out, /30 100/);
  assert.match(out, /pty-42/);
  pty.sendInput("exit 5\n");
  assert.equal(await pty.wait(), 5);
  await reading;

  // signal: SIGINT ends a sleeping program
  let seen = 0;
  const p2 = await sb.commands.createPty({ command: "echo ready; sleep 60", onData: (d) => (seen += d.length) });
  for (let i = 0; i < 100 && seen === 0; i++) await new Promise((r) => setTimeout(r, 50));
  assert.ok(seen > 0, "onData saw no output");
  const t0 = Date.now();
  p2.signal("SIGINT");
  const code2 = await p2.wait();
  assert.notEqual(code2, 0);
  assert.ok(Date.now() - t0 < 10_000);

  // kill: the program ends and the terminal closes
  const p3 = await sb.commands.createPty({ command: "sleep 60" });
  const t1 = Date.now();
  await p3.kill();
  const code3 = await p3.wait().catch(() => "closed");
  assert.ok(code3 === "closed" || code3 !== 0, `exit ${code3}`);
  assert.ok(Date.now() - t1 < 10_000);
});
