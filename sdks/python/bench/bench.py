"""Latencies through the Python SDK against a running hybox server, wasm sandboxes.

Prints a table: create -> first command result (p50/p99), warm `1+1` (p50), and the SDK's
overhead over raw httpx for the same requests (p50 of the SDK minus p50 of raw httpx).
Usage: python bench.py --domain HOST:PORT --api-key KEY [-n N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Callable

import httpx

import hybox


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def timed(fn: Callable[[], object], n: int, warmup: int = 5) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--domain", required=True)
    ap.add_argument("--api-key", required=True)
    ap.add_argument("-n", type=int, default=200)
    a = ap.parse_args()
    cfg = hybox.ConnectionConfig(domain=a.domain, api_key=a.api_key)
    base = f"http://{a.domain}/v1"
    auth = {"OPEN-SANDBOX-API-KEY": a.api_key}
    rows: list[tuple[str, str]] = []

    # create -> first command result, sync SDK (the sandbox is killed outside the timing)
    def create_first() -> float:
        t = time.perf_counter()
        sb = hybox.Sandbox.create(config=cfg)
        r = sb.commands.run("echo hi")
        dt = (time.perf_counter() - t) * 1000
        assert r.stdout == "hi\n"
        sb.kill()
        sb.close()
        return dt

    for _ in range(5):
        create_first()
    cf = [create_first() for _ in range(a.n)]
    rows.append(("create -> first command result (Sandbox)", f"p50 {pct(cf, 50):.2f} ms  p99 {pct(cf, 99):.2f} ms"))

    async def acreate_first() -> float:
        t = time.perf_counter()
        sb = await hybox.AsyncSandbox.create(config=cfg)
        await sb.commands.run("echo hi")
        dt = (time.perf_counter() - t) * 1000
        await sb.kill()
        await sb.close()
        return dt

    async def many() -> list[float]:
        for _ in range(5):
            await acreate_first()
        return [await acreate_first() for _ in range(a.n)]

    acf = asyncio.run(many())
    rows.append(("create -> first command result (AsyncSandbox)", f"p50 {pct(acf, 50):.2f} ms  p99 {pct(acf, 99):.2f} ms"))

    # the same over raw httpx: create, endpoint, command
    raw = httpx.Client(timeout=30)

    def raw_create_first() -> float:
        t = time.perf_counter()
        info = raw.post(base + "/sandboxes", headers=auth, json={"image": {"uri": "wasm://default"}, "timeout": 300}).json()
        ep = raw.get(f"{base}/sandboxes/{info['id']}/endpoints/44772", headers=auth).json()
        with raw.stream("POST", "http://" + ep["endpoint"] + "/command", headers=ep["headers"],
                        json={"command": "echo hi"}) as resp:
            for _line in resp.iter_lines():
                pass
        dt = (time.perf_counter() - t) * 1000
        raw.delete(f"{base}/sandboxes/{info['id']}", headers=auth)
        return dt

    for _ in range(5):
        raw_create_first()
    rcf = [raw_create_first() for _ in range(a.n)]
    rows.append(("create -> first command result (raw httpx)", f"p50 {pct(rcf, 50):.2f} ms  p99 {pct(rcf, 99):.2f} ms"))

    with hybox.Sandbox.create(config=cfg) as sb:
        warm = timed(lambda: sb.code.run("1+1"), a.n)
        rows.append(("warm 1+1 (Sandbox)", f"p50 {pct(warm, 50):.2f} ms  p99 {pct(warm, 99):.2f} ms"))
        url, headers = sb.endpoint_url(44772)

        def raw_code() -> None:
            with raw.stream("POST", url + "/code", headers=headers,
                            json={"code": "1+1", "context": {"language": "python"}}) as resp:
                for line in resp.iter_lines():
                    if line:
                        json.loads(line)

        raw_warm = timed(raw_code, a.n)
        rows.append(("warm 1+1 (raw httpx)", f"p50 {pct(raw_warm, 50):.2f} ms"))
        info_sdk = timed(sb.get_info, a.n * 2)
        info_raw = timed(lambda: raw.get(f"{base}/sandboxes/{sb.id}", headers=auth).json(), a.n * 2)
        rows.append(("SDK overhead, code.run 1+1 (p50 SDK - p50 raw)",
                     f"{pct(warm, 50) - pct(raw_warm, 50):+.3f} ms"))
        rows.append(("SDK overhead, get_info (p50 SDK - p50 raw)",
                     f"{pct(info_sdk, 50) - pct(info_raw, 50):+.3f} ms  (SDK {pct(info_sdk, 50):.3f}, raw {pct(info_raw, 50):.3f})"))
    async def async_info() -> tuple[list[float], list[float]]:
        sb = await hybox.AsyncSandbox.create(config=cfg)
        ac = httpx.AsyncClient()
        sdk: list[float] = []
        rawa: list[float] = []
        for i in range(a.n * 2 + 10):
            t = time.perf_counter()
            await sb.get_info()
            d1 = (time.perf_counter() - t) * 1000
            t = time.perf_counter()
            (await ac.get(f"{base}/sandboxes/{sb.id}", headers=auth)).json()
            d2 = (time.perf_counter() - t) * 1000
            if i >= 10:
                sdk.append(d1)
                rawa.append(d2)
        await sb.kill()
        await ac.aclose()
        return sdk, rawa

    ai, ar = asyncio.run(async_info())
    rows.append(("SDK overhead, AsyncSandbox.get_info (p50 - raw AsyncClient)",
                 f"{pct(ai, 50) - pct(ar, 50):+.3f} ms  (SDK {pct(ai, 50):.3f}, raw {pct(ar, 50):.3f})"))
    rows.append(("SDK overhead, create -> first result (p50 SDK - p50 raw)",
                 f"{pct(cf, 50) - pct(rcf, 50):+.3f} ms"))
    raw.close()
    w = max(len(k) for k, _ in rows)
    print(f"n={a.n} per measurement; medians and 99th percentiles in milliseconds")
    for k, v in rows:
        print(f"{k:<{w}}  {v}")


if __name__ == "__main__":
    main()
