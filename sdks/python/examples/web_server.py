"""A web server in a container sandbox, reached through its endpoint.

Needs a hybox server with a container runtime (``runc``) and a Python image; wasm sandboxes
have no ports. The endpoint's headers must go with every request to it.
Run: HYBOX_DOMAIN=... HYBOX_API_KEY=... python web_server.py [IMAGE]
"""

from __future__ import annotations

import sys
import time

import httpx

import hybox

IMAGE = sys.argv[1] if len(sys.argv) > 1 else "localhost/hybox/python:3-bookworm"


def main() -> None:
    with hybox.Sandbox.create(IMAGE, runtime="runc") as sandbox:
        sandbox.files.write("/srv/index.html", "<h1>hello from the sandbox</h1>\n")
        server = sandbox.commands.run("cd /srv && python3 -m http.server 8000", background=True)
        url, headers = sandbox.endpoint_url(8000)
        print("endpoint:", url)
        for _ in range(100):
            try:
                r = httpx.get(url + "/index.html", headers=headers, timeout=2)
                if r.status_code == 200:
                    print("GET /index.html:", r.text.strip())
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        else:
            raise SystemExit("the web server did not answer")
        server.kill()


if __name__ == "__main__":
    main()
