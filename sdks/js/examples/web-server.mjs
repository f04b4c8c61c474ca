// A web server in a container sandbox, reached through the sandbox's
// endpoint for its port. Needs a server with the runc runtime and the
// image localhost/hybox/python:3-bookworm (`make image`).
import { Sandbox } from "@hybox/sdk";

const sandbox = await Sandbox.create({
  image: "localhost/hybox/python:3-bookworm",
  extensions: { "hybox.io/runtime": "runc" },
});
try {
  await sandbox.files.write("/srv/index.html", "<h1>hello from a sandbox</h1>\n");
  await sandbox.commands.run("cd /srv && python3 -m http.server 8000", { background: true });

  // The endpoint is a URL on the hybox server plus the headers it needs.
  const ep = await sandbox.endpoint(8000);
  let body = "";
  for (let i = 0; i < 100 && !body; i++) {
    const resp = await fetch(ep.url + "/index.html", { headers: ep.headers }).catch(() => undefined);
    if (resp?.ok) body = await resp.text();
    else await new Promise((r) => setTimeout(r, 100));
  }
  console.log("GET /index.html:", body.trim());
} finally {
  await sandbox.kill();
}
