// The README's quickstart, run exactly as written, prints what the README says.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { test } from "node:test";

function block(md, after, lang) {
  const start = md.indexOf(after);
  assert.ok(start >= 0, `README has no "${after}"`);
  const fence = "```" + lang + "\n";
  const i = md.indexOf(fence, start);
  assert.ok(i >= 0, `no ${fence.trim()} block after "${after}"`);
  const j = md.indexOf("\n```", i + fence.length);
  return md.slice(i + fence.length, j + 1);
}

test("README quickstart runs as written", () => {
  const md = readFileSync("README.md", "utf8");
  const code = block(md, "## Quickstart", "js");
  const want = block(md, "It prints:", "");
  assert.match(block(md, "## Quickstart", "sh"), /node quickstart\.mjs/);
  writeFileSync("quickstart.mjs", code);
  const got = execFileSync(process.execPath, ["quickstart.mjs"], { encoding: "utf8", timeout: 60_000 });
  assert.equal(got, want);
});
