"""localkube API server at scale: 1,000 objects created while 50 watchers follow them.

Prints create, list and watch-delivery latency and the server's resident memory. Run from the repository root:
    python -m bench.localkube_scale [--objects 1000] [--watchers 50]
The server runs in its own process so its RSS is its own."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import aiohttp

NS_PATH = "/api/v1/namespaces/default/configmaps"


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def quantiles(values: list[float]) -> str:
    ordered = sorted(values)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000  # noqa: E731
    return f"p50 {pick(0.5):.1f} ms, p99 {pick(0.99):.1f} ms, max {ordered[-1] * 1000:.1f} ms"


async def watcher(session: aiohttp.ClientSession, url: str, rv: str, expected: int,
                  delays: list[float]) -> None:
    params = {"watch": "true", "resourceVersion": rv, "timeoutSeconds": "600"}
    seen = 0
    async with session.get(url + NS_PATH, params=params, timeout=aiohttp.ClientTimeout(total=None)) as response:
        async for line in response.content:
            event = json.loads(line)
            if event["type"] == "ADDED":
                sent = float(event["object"]["metadata"]["annotations"]["bench/sent"])
                delays.append(time.time() - sent)
                seen += 1
                if seen == expected:
                    return


async def run(url: str, objects: int, watchers: int, concurrency: int) -> dict[str, str]:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=watchers + concurrency + 4)) as session:
        async with session.get(url + NS_PATH) as response:
            rv = (await response.json())["metadata"]["resourceVersion"]
        delays: list[float] = []
        watches = [asyncio.create_task(watcher(session, url, rv, objects, delays)) for _ in range(watchers)]
        await asyncio.sleep(0.5)  # let every watch connect before the first create
        creates: list[float] = []
        queue = list(range(objects))

        async def creator() -> None:
            while queue:
                i = queue.pop()
                body = {"metadata": {"name": f"cm-{i:05d}", "labels": {"bench": "yes", "shard": str(i % 10)},
                                     "annotations": {"bench/sent": repr(time.time())}}, "data": {"k": "v" * 64}}
                start = time.perf_counter()
                async with session.post(url + NS_PATH, json=body) as response:
                    assert response.status == 201, await response.text()
                creates.append(time.perf_counter() - start)

        started = time.perf_counter()
        await asyncio.gather(*(creator() for _ in range(concurrency)))
        create_wall = time.perf_counter() - started
        await asyncio.wait_for(asyncio.gather(*watches), 120)
        lists: dict[str, list[float]] = {"full": [], "selector": [], "page": [], "table": []}
        for _ in range(20):
            for kind, params, headers in (
                    ("full", {}, {}), ("selector", {"labelSelector": "shard=3"}, {}), ("page", {"limit": "100"}, {}),
                    ("table", {}, {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"})):
                start = time.perf_counter()
                async with session.get(url + NS_PATH, params=params, headers=headers) as response:
                    await response.read()
                lists[kind].append(time.perf_counter() - start)
    return {
        "create": f"{objects} objects in {create_wall:.2f} s ({objects / create_wall:.0f}/s, {concurrency} "
                  f"concurrent): {quantiles(creates)}",
        "watch delivery": f"{len(delays)} events to {watchers} watchers: {quantiles(delays)}",
        **{f"list {kind}": quantiles(values) for kind, values in lists.items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench localkube", description=__doc__)
    parser.add_argument("--objects", type=int, default=1000)
    parser.add_argument("--watchers", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=20)
    args = parser.parse_args(argv)
    server = subprocess.Popen([sys.executable, "-m", "localkube.apiserver"], stdout=subprocess.PIPE, text=True)
    try:
        url = server.stdout.readline().strip()
        idle = rss_mib(server.pid)
        results = asyncio.run(run(url, args.objects, args.watchers, args.concurrency))
        results["server RSS"] = f"{idle:.0f} MiB idle, {rss_mib(server.pid):.0f} MiB after the run"
        results["CPU"] = (f"server {cpu_seconds(server.pid):.1f} s, this client process "
                          f"{time.process_time():.1f} s (on {os.cpu_count()} cores)")
    finally:
        server.terminate()
        server.wait(timeout=30)
    for name, value in results.items():
        print(f"{name:>15}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
