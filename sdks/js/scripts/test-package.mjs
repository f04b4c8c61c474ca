// make test-sdk-js: packs @hybox/sdk with `npm pack`, installs the tarball
// into a fresh folder under build/, and runs the tests there (node's test
// runner) against real `hybox serve` processes, which are stopped at the
// end whatever happens. A file missing from the package fails the suite.
//
// Environment: HYBOX_BIN (default ../../bin/hybox), HYBOX_GUEST_DIR (default
// ../../build/guests), HYBOX_SDK_CONTAINERD (a containerd socket: container
// tests run; absent: they skip, saying so), HYBOX_SDK_NAMESPACE (its
// namespace holding the test images), HYBOX_SDK_RUNSC (gVisor's runsc: runsc
// tests run too), TEST_FILTER (a substring of test file names).
// scripts/sdk-containers.sh sets the HYBOX_SDK_* variables as root.
import { execFileSync, spawn } from "node:child_process";
import { cpSync, existsSync, mkdirSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { startServer } from "../test/harness.mjs";

const pkgDir = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const root = resolve(pkgDir, "../..");
const bin = process.env.HYBOX_BIN || join(root, "bin", "hybox");
const guestDir = process.env.HYBOX_GUEST_DIR || join(root, "build", "guests");
const work = join(root, "build", "js-sdk");
const cacheDir = join(root, "build", "js-sdk-wazero-cache");
const containerd = process.env.HYBOX_SDK_CONTAINERD || "";
const namespace = process.env.HYBOX_SDK_NAMESPACE || "";
const runsc = process.env.HYBOX_SDK_RUNSC || "";

if (!existsSync(bin)) {
  console.error(`test-sdk-js: no hybox binary at ${bin}: run \`make build\` (or set HYBOX_BIN)`);
  process.exit(1);
}

// 1. Pack and install into a fresh folder.
rmSync(work, { recursive: true, force: true });
const install = join(work, "install");
mkdirSync(install, { recursive: true });
const npmQuiet = { stdio: ["ignore", "pipe", "inherit"], encoding: "utf8" };
const packed = JSON.parse(execFileSync("npm", ["pack", "--json", "--pack-destination", work], { cwd: pkgDir, ...npmQuiet }));
const tarball = join(work, packed[0].filename);
console.log(`test-sdk-js: packed ${packed[0].filename} (${packed[0].files.length} files)`);
writeFileSync(join(install, "package.json"), JSON.stringify({ name: "hybox-sdk-js-test", private: true, type: "module" }, null, 2));
execFileSync("npm", ["install", "--no-audit", "--no-fund", "--prefer-offline", tarball], { cwd: install, ...npmQuiet });
for (const d of ["test", "examples"]) cpSync(join(pkgDir, d), join(install, d), { recursive: true });
cpSync(join(pkgDir, "README.md"), join(install, "README.md"));

// 2. Servers: the default one and one that runs one execution at a time
//    without a vault key (for 429 and 503 answers).
const servers = [];
let code = 1;
const stopAll = async () => {
  await Promise.all(servers.map((s) => s.stop().catch(() => undefined)));
  servers.length = 0;
};
for (const sig of ["SIGINT", "SIGTERM"]) {
  process.on(sig, async () => {
    await stopAll();
    process.exit(130);
  });
}
try {
  // One after the other: the first compiles the guests into the shared cache.
  const main = await startServer({ bin, guestDir, cacheDir, containerd, namespace, runsc });
  servers.push(main);
  const limited = await startServer({ bin, guestDir, cacheDir, extraToml: "[wasm]\nmax_concurrent = 1\nqueue_wait = \"10ms\"\n", vault: false });
  servers.push(limited);
  const files = readdirSync(join(install, "test"))
    .filter((f) => f.endsWith(".test.mjs") && f.includes(process.env.TEST_FILTER ?? ""))
    .sort()
    .map((f) => join("test", f));
  const env = {
    ...process.env,
    HYBOX_DOMAIN: main.url,
    HYBOX_API_KEY: main.apiKey,
    HYBOX_TEST_LIMITED_DOMAIN: limited.url,
    HYBOX_TEST_LIMITED_API_KEY: limited.apiKey,
    HYBOX_TEST_CONTAINERS: containerd ? "1" : "",
    HYBOX_TEST_RUNSC: containerd && runsc ? "1" : "",
    HYBOX_TEST_PACKAGE_DIR: pkgDir,
  };
  delete env.OPEN_SANDBOX_DOMAIN;
  delete env.OPEN_SANDBOX_API_KEY;
  code = await new Promise((res) => {
    const child = spawn(process.execPath, ["--test", "--test-concurrency=1", ...files], { cwd: install, env, stdio: "inherit" });
    child.on("exit", (c, s) => res(c ?? (s ? 1 : 0)));
  });
} catch (e) {
  console.error("test-sdk-js:", e?.message ?? e);
  code = 1;
} finally {
  await stopAll();
}
process.exit(code);
