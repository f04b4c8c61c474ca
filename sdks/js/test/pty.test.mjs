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

  const p2 = await sb.commands.createPty({ command: "sleep 60" });
  await p2.kill();
  await assert.rejects(p2.wait().then(() => { throw new Error("still running"); }).catch((e) => { if (e.message === "still running") throw e; throw e; }), () => true).catch(() => undefined);
});
