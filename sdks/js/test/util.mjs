// Helpers of the SDK's tests. The tests import the installed package
// (@hybox/sdk from the tarball), never the sources.
import { Sandbox } from "@hybox/sdk";

/** Creates a wasm sandbox and registers its removal with the test. */
export async function newSandbox(t, opts = {}) {
  const sb = await Sandbox.create(opts);
  t.after(() => sb.kill().catch(() => undefined));
  return sb;
}

/** The server that runs one execution at a time and has no vault key. */
export function limited(extra = {}) {
  return { domain: process.env.HYBOX_TEST_LIMITED_DOMAIN, apiKey: process.env.HYBOX_TEST_LIMITED_API_KEY, ...extra };
}

/** Polls f until it returns a truthy value or ms pass. */
export async function eventually(f, ms = 10_000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await f();
    if (v || Date.now() > end) return v;
    await new Promise((r) => setTimeout(r, 50));
  }
}

export const containers = process.env.HYBOX_TEST_CONTAINERS === "1";
export const noContainers = containers ? false : "container sandboxes are not configured (set HYBOX_SDK_CONTAINERD to a containerd socket; `make test-sdk-js` does as root with containerd)";
