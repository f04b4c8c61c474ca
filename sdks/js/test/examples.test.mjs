// The examples run against the real server and do what they say.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { test } from "node:test";
import { noContainers } from "./util.mjs";

const runExample = (name) => execFileSync(process.execPath, [`examples/${name}`], { encoding: "utf8", timeout: 120_000 });

test("example: code-interpreter loop", () => {
  const out = runExample("code-interpreter.mjs");
  assert.match(out, /\[1\] execution 1\n  stdout: radius 3\n/);
  assert.match(out, /result: text\/plain => 28\.27/);
  assert.match(out, /result: text\/plain, text\/html => /);
  assert.match(out, /error: NameError: name 'undefined_name' is not defined/);
  assert.match(out, /\[5\] execution 5\n  result: text\/plain => 9\.42/);
});

test("example: egress policy and a vault credential", () => {
  const out = runExample("egress-vault.mjs");
  assert.match(out, /^before: refused: .*denied/m);
  assert.match(out, /^policy: enforcing allow 127\.0\.0\.1$/m);
  assert.match(out, /^allowed: authorization: \(none\)$/m);
  assert.match(out, /^with the credential: authorization: Bearer sk-example-123$/m);
  assert.match(out, /^the sandbox's environment has it: False$/m);
});

test("example: web server in a container through its endpoint", { skip: noContainers }, () => {
  const out = runExample("web-server.mjs");
  assert.match(out, /GET \/index\.html: <h1>hello from a sandbox<\/h1>/);
});
