// The package: its files, its entries, and a core with no Node-only import
// (so that it runs in a browser).
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
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

test("the browser build works against the server with explicit options and reads no environment", () => {
  const script = `
    import { Sandbox } from "@hybox/sdk";
    const opts = { domain: process.env.D, apiKey: process.env.K };
    const sb = await Sandbox.create(opts);
    const r = await sb.commands.run("echo from the core");
    const x = await sb.code.run("6 * 7");
    await sb.kill();
    // HYBOX_DOMAIN and HYBOX_API_KEY are set, but the core does not read them:
    // without options it goes to the default address with no key, and fails.
    let envUsed = false;
    try { await Sandbox.list({ maxRetries: 0, requestTimeoutMs: 2000 }); envUsed = true; } catch {}
    console.log(JSON.stringify({ out: r.stdout, text: x.text, entry: import.meta.resolve("@hybox/sdk"), envUsed }));
  `;
  const out = execFileSync(process.execPath, ["--conditions=browser", "--input-type=module", "-e", script], {
    encoding: "utf8",
    env: { ...process.env, D: process.env.HYBOX_DOMAIN, K: process.env.HYBOX_API_KEY },
  });
  const got = JSON.parse(out);
  assert.equal(got.out, "from the core\n");
  assert.equal(got.text, "42");
  assert.match(got.entry, /\/dist\/index\.js$/, "the browser condition selects the core");
  assert.equal(got.envUsed, false);
});
