// The package: its files, its entries, and a core with no Node-only import
// (so that it runs in a browser).
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { test } from "node:test";
import * as sdk from "@hybox/sdk";
import * as core from "@hybox/sdk/core";

const require = createRequire(import.meta.url);
const pkgDir = dirname(require.resolve("@hybox/sdk/package.json"));

test("the package has its entries and type declarations", () => {
  const pkg = JSON.parse(readFileSync(join(pkgDir, "package.json"), "utf8"));
  assert.equal(pkg.name, "@hybox/sdk");
  assert.equal(pkg.type, "module");
  const dist = readdirSync(join(pkgDir, "dist"));
  for (const f of ["index.js", "index.d.ts", "node.js", "node.d.ts", "schema.gen.d.ts"]) assert.ok(dist.includes(f), `dist/${f} missing`);
  assert.ok(readFileSync(join(pkgDir, "README.md"), "utf8").includes("## Quickstart"));
  for (const name of ["Sandbox", "run", "HyboxError", "NotFoundError", "RateLimitedError", "Execution", "Result"]) {
    assert.equal(typeof sdk[name], "function", name);
    assert.equal(sdk[name], core[name], `${name}: the Node entry re-exports the core`);
  }
});

test("the core imports nothing of Node", () => {
  const seen = new Set();
  const visit = (file) => {
    if (seen.has(file)) return;
    seen.add(file);
    const src = readFileSync(join(pkgDir, "dist", file), "utf8");
    for (const m of src.matchAll(/(?:import|export)\s[^;]*?from\s+["']([^"']+)["']|import\(\s*["']([^"']+)["']\s*\)/g)) {
      const spec = m[1] ?? m[2];
      assert.ok(spec.startsWith("./"), `dist/${file} imports ${spec}: the core must import only its own modules`);
      visit(spec.slice(2));
    }
    assert.ok(!/\bprocess\.|\brequire\(|\bBuffer\b/.test(src), `dist/${file} uses a Node global`);
  };
  visit("index.js");
  assert.ok(seen.size > 5 && !seen.has("node.js"));
});
