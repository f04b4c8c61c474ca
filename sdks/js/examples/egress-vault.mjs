// A network policy changed while the sandbox runs, and a credential the
// server injects into the sandbox's requests to one API: the code in the
// sandbox never sees the secret.
//
// The "API" is a small HTTP server this script starts on the loopback
// interface; it answers with the Authorization header it received.
import { createServer } from "node:http";
import { Sandbox } from "@hybox/sdk";

const api = createServer((req, res) => res.end(`authorization: ${req.headers.authorization ?? "(none)"}`));
await new Promise((r) => api.listen(0, "127.0.0.1", r));
const port = api.address().port;
const url = `http://127.0.0.1:${port}/v1/models`;

const fetchCell = (u) => `
import urllib.request
try:
    print(urllib.request.urlopen(${JSON.stringify(u)}, timeout=10).read().decode())
except Exception as e:
    print("refused:", e.reason if hasattr(e, "reason") else e)
`;

// No network but what the policy allows; the credential proxy is on.
const sandbox = await Sandbox.create({
  networkPolicy: { defaultAction: "deny" },
  credentialProxy: { enabled: true },
});
try {
  const out = async (code) => (await sandbox.code.run(code)).logs.stdout.join("").trim();
  console.log("before:", await out(fetchCell(url)));

  // Allow the API while the sandbox runs.
  const st = await sandbox.egress.patchRules([{ action: "allow", target: "127.0.0.1" }]);
  console.log("policy:", st.mode, st.policy.egress.map((r) => `${r.action} ${r.target}`).join(", "));
  console.log("allowed:", await out(fetchCell(url)));

  // A credential, bound to that API: the server adds it to matching requests.
  const vault = await sandbox.vault.create({
    credentials: [{ name: "api-token", source: { type: "inline", value: "sk-example-123" } }],
    bindings: [
      {
        name: "models-api",
        match: { schemes: ["http"], ports: [port], hosts: ["127.0.0.1"], paths: ["/v1/*"] },
        auth: { type: "bearer", credential: "api-token" },
      },
    ],
  });
  console.log("vault:", vault.credentials.map((c) => `${c.name} (${c.sourceType})`).join(", "));
  console.log("with the credential:", await out(fetchCell(url)));
  console.log("the sandbox's environment has it:", (await out("import os\nprint('sk-example-123' in str(os.environ))")));
} finally {
  await sandbox.kill();
  api.close();
}
