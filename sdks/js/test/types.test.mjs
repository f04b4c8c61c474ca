// The type declarations of the installed package serve a TypeScript user
// (module NodeNext, strict): a program using the surface type-checks, and a
// wrong use does not.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

const tsc = join(process.env.HYBOX_TEST_PACKAGE_DIR ?? "", "node_modules", "typescript", "bin", "tsc");

const program = `
import { Sandbox, run, NotFoundError, RateLimitedError, type Execution, type CommandResult, type SandboxInfo, type FileInfo, type Event } from "@hybox/sdk";

export async function use(signal: AbortSignal): Promise<number> {
  const sb = await Sandbox.create({ metadata: { a: "b" }, timeout: 600, signal });
  const info: SandboxInfo = await sb.getInfo();
  const r: CommandResult = await sb.commands.run("echo hi", { cwd: "/", envs: { A: "1" }, onStdout: (l: string) => void l, signal });
  const h = await sb.commands.run("sleep 1", { background: true });
  const st = await h.wait({ signal });
  const x: Execution = await sb.code.run("1+1", { language: "python", onResult: (res) => void res.html, signal });
  for await (const ev of sb.code.stream("1")) { const e: Event = ev; void e.type; }
  const files: FileInfo[] = await sb.files.list("/");
  const ep = await sb.endpoint(8000);
  const p = await sb.egress.patchRules([{ action: "allow", target: "example.com" }]);
  const once = await run("1", { language: "javascript" });
  try { await Sandbox.connect("x"); } catch (e) { if (e instanceof RateLimitedError) return e.retryAfter; if (e instanceof NotFoundError) return e.status; }
  return r.exitCode + (st.exit_code ?? 0) + x.executionCount + files.length + ep.url.length + p.policy!.egress!.length + once.results.length + info.id.length;
}
`;

test("a TypeScript program type-checks against the declarations; a wrong one does not", { timeout: 120_000 }, () => {
  mkdirSync("ts-consumer", { recursive: true });
  writeFileSync(join("ts-consumer", "tsconfig.json"), JSON.stringify({ compilerOptions: { module: "NodeNext", moduleResolution: "NodeNext", target: "ES2022", strict: true, noEmit: true, lib: ["ES2022", "DOM"], types: [], skipLibCheck: true }, include: ["*.ts"] }));
  writeFileSync(join("ts-consumer", "good.ts"), program);
  let r = spawnSync(process.execPath, [tsc, "-p", "ts-consumer"], { encoding: "utf8" });
  assert.equal(r.status, 0, r.stdout + r.stderr);
  writeFileSync(join("ts-consumer", "bad.ts"), `import { Sandbox } from "@hybox/sdk";\nexport const n: string = (await Sandbox.create()).commands.run("x", { cwd: 3 });\n`);
  r = spawnSync(process.execPath, [tsc, "-p", "ts-consumer"], { encoding: "utf8" });
  assert.notEqual(r.status, 0, "a wrong program type-checked");
  assert.match(r.stdout, /bad\.ts/);
});
