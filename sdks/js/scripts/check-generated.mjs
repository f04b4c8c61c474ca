// Fails when src/schema.gen.ts is not what the pinned openapi-typescript makes
// of sdks/openapi.yaml today.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const dir = mkdtempSync(join(tmpdir(), "hybox-js-gen-"));
try {
  const out = join(dir, "schema.gen.ts");
  execFileSync("npx", ["--no-install", "openapi-typescript", "../openapi.yaml", "--output", out], { stdio: ["ignore", "ignore", "inherit"] });
  execFileSync("node", ["scripts/stamp.mjs", out]);
  if (readFileSync(out, "utf8") !== readFileSync("src/schema.gen.ts", "utf8")) {
    console.error("sdks/js/src/schema.gen.ts is stale: run `npm run generate` in sdks/js and commit it");
    process.exit(1);
  }
  console.log("sdks/js/src/schema.gen.ts is up to date");
} finally {
  rmSync(dir, { recursive: true, force: true });
}
