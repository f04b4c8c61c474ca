// Starts and stops real `hybox serve` processes for the SDK's tests: a free
// loopback port, a temporary data directory, a random API key.
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/**
 * Starts `hybox serve` (binary `bin`) with extra TOML configuration and
 * resolves with {url, apiKey, stop}. With `containerd` (a socket) it has
 * container sandboxes from that containerd's `namespace`, and runsc
 * sandboxes too with `runsc` (the binary). Rejects with the server's log
 * when it does not come up.
 */
export async function startServer({ bin, guestDir, cacheDir, extraToml = "", containerd = "", namespace = "", runsc = "", vault = true }) {
  const dir = mkdtempSync(join(tmpdir(), "hybox-js-sdk-"));
  if (cacheDir) {
    mkdirSync(cacheDir, { recursive: true });
    symlinkSync(cacheDir, join(dir, "wazero-cache"));
  }
  const apiKey = "js-sdk-test-" + randomBytes(16).toString("hex");
  const cfg = join(dir, "hybox.toml");
  const oci = containerd && namespace ? `\n[oci]\nnamespace = ${JSON.stringify(namespace)}\n` : "";
  writeFileSync(cfg, extraToml + oci, { mode: 0o600 });
  const args = ["serve", "--config", cfg, "--addr", "127.0.0.1:0", "--data-dir", dir, "--api-key", apiKey, "--guest-dir", guestDir];
  if (containerd) args.push("--containerd", containerd);
  if (containerd && runsc) args.push("--runsc-binary", runsc);
  const child = spawn(bin, args, {
    env: { PATH: process.env.PATH, HOME: process.env.HOME, ...(vault ? { HYBOX_VAULT_KEY: randomBytes(32).toString("hex") } : {}) },
    stdio: ["ignore", "ignore", "pipe"],
  });
  const log = [];
  const exited = new Promise((resolve) => child.once("exit", resolve));
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGINT");
      const t = setTimeout(() => child.kill("SIGKILL"), 10_000);
      await exited;
      clearTimeout(t);
    }
    rmSync(dir, { recursive: true, force: true });
  };
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("hybox serve did not listen within 2 minutes:\n" + log.join("\n"))), 120_000);
    let buf = "";
    child.stderr.setEncoding("utf8");
    child.stderr.on("data", (s) => {
      buf += s;
      let i;
      while ((i = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        if (log.length < 100) log.push(line);
        const m = line.includes('msg="hybox listening"') && /addr=(\S+)/.exec(line);
        if (m) {
          clearTimeout(timer);
          resolve("http://" + m[1]);
        }
      }
    });
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`hybox serve exited (${code}):\n` + log.join("\n")));
    });
  }).catch(async (e) => {
    await stop();
    throw e;
  });
  return { url, apiKey, stop };
}
