import assert from "node:assert/strict";
import { test } from "node:test";
import { ConflictError, InvalidArgumentError, NotFoundError } from "@hybox/sdk";
import { newSandbox } from "./util.mjs";

const targets = (st) => (st.policy?.egress ?? []).map((r) => `${r.action} ${r.target}`);

test("egress policy: get, set, patch rules, remove rules", async (t) => {
  const sb = await newSandbox(t, { networkPolicy: { defaultAction: "deny", egress: [{ action: "allow", target: "example.com" }] } });
  const st = await sb.egress.getPolicy();
  assert.equal(st.mode, "enforcing");
  assert.deepEqual(targets(st), ["allow example.com"]);
  const set = await sb.egress.setPolicy({ defaultAction: "deny", egress: [{ action: "allow", target: "*.example.org" }] });
  assert.deepEqual(targets(set), ["allow *.example.org"]);
  const patched = await sb.egress.patchRules([{ action: "deny", target: "bad.example.org" }]);
  assert.deepEqual(targets(patched), ["deny bad.example.org", "allow *.example.org"]);
  const removed = await sb.egress.removeRules(["*.example.org"]);
  assert.deepEqual(targets(removed), ["deny bad.example.org"]);
  assert.deepEqual(targets(await sb.egress.getPolicy()), ["deny bad.example.org"]);
  await assert.rejects(sb.egress.setPolicy({ defaultAction: "maybe" }), InvalidArgumentError);
});

test("credential vault: create, get, list, patch, delete; secrets never come back", async (t) => {
  const sb = await newSandbox(t, {
    credentialProxy: { enabled: true },
    networkPolicy: { defaultAction: "deny", egress: [{ action: "allow", target: "api.example.com" }] },
  });
  await assert.rejects(sb.vault.get(), NotFoundError);
  const created = await sb.vault.create({
    credentials: [{ name: "token", source: { type: "inline", value: "s3cret-value" } }],
    bindings: [{ name: "api", match: { hosts: ["api.example.com"] }, auth: { type: "bearer", credential: "token" } }],
  });
  assert.ok(created.revision >= 1);
  assert.ok(!JSON.stringify(created).includes("s3cret-value"));
  await assert.rejects(sb.vault.create({ credentials: [], bindings: [] }), (e) => e instanceof ConflictError && e.code === "VAULT_EXISTS");
  const got = await sb.vault.get();
  assert.equal(got.revision, created.revision);
  assert.deepEqual((await sb.vault.credentials()).credentials.map((c) => c.name), ["token"]);
  assert.equal((await sb.vault.credential("token")).name, "token");
  assert.equal((await sb.vault.binding("api")).name, "api");
  assert.ok(JSON.stringify(await sb.vault.bindings()).includes("api"));
  const patched = await sb.vault.patch({
    expectedRevision: got.revision,
    credentials: { add: [{ name: "other", source: { type: "inline", value: "v2" } }] },
  });
  assert.ok(patched.revision > got.revision);
  await assert.rejects(sb.vault.patch({ expectedRevision: got.revision, credentials: { delete: ["other"] } }), (e) => e.code === "REVISION_CONFLICT");
  await sb.vault.delete();
  await assert.rejects(sb.vault.get(), NotFoundError);
});
