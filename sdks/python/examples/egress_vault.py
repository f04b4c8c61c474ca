"""An egress policy plus a vault credential: code in the sandbox calls an API whose token it
never sees; hybox injects it on the way out, and every other destination is refused.

The "API" here is a small local HTTP server that echoes the Authorization header it got, so
the example runs anywhere; point ``API_HOST``/``API_PORT`` at a real service instead.
Run: HYBOX_DOMAIN=... HYBOX_API_KEY=... python egress_vault.py
"""

from __future__ import annotations

import http.server
import json
import threading

import hybox


class Echo(http.server.BaseHTTPRequestHandler):
    """Answers with the Authorization header of the request."""

    def do_GET(self) -> None:
        body = json.dumps({"authorization": self.headers.get("Authorization")}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def main() -> None:
    api = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=api.serve_forever, daemon=True).start()
    host, port = "127.0.0.1", api.server_address[1]

    policy = {"defaultAction": "deny", "egress": [hybox.allow(host)]}
    with hybox.Sandbox.create(network_policy=policy, credential_proxy=True) as sandbox:
        print("policy mode:", sandbox.egress.get().mode)
        sandbox.vault.create(
            credentials=[hybox.inline_credential("api-token", "s3cret-token")],
            bindings=[{
                "name": "local-api",
                "match": {"hosts": [host], "schemes": ["http"], "ports": [port]},
                "auth": {"type": "bearer", "credential": "api-token"},
            }],
        )
        print("vault credentials:", [c.name for c in sandbox.vault.credentials().credentials])

        call = sandbox.code.run(
            "import urllib.request\n"
            f"urllib.request.urlopen('http://{host}:{port}/whoami').read().decode()"
        )
        call.check()
        print("the API saw:", call.text)

        refused = sandbox.code.run("import urllib.request\nurllib.request.urlopen('http://example.com/')")
        print("example.com:", refused.error.name if refused.error else "allowed?!")
    api.shutdown()


if __name__ == "__main__":
    main()
