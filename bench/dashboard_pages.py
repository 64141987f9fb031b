"""The dashboard's page weights and render times (SPEC §16; issue #32 "page weight and render time
reported"): for the overview, usage, the batches list, and the batch page of a 100-item and of a
50 000-item batch (its first page of items, and filtered to its failures), how many bytes the page's
HTML is, how many a first visit transfers with the assets it links (Relay does not compress them), and
how long the server takes to answer it — next to two baselines measured the same way in the same
run: a static asset (``relay.css``, no template, no query) and the sign-in page (a template, no query).

One ``relay serve`` (SQLite by default, ``--backend postgres`` for the suite's Postgres and Redis) with
the tests' live catalog, filled by ``tests/e2e/dashboard/demo_data.py`` as for the screenshots: usage
events over the last hour (``--per-minute`` a minute, default 100, in waves) and 14 days across three
projects and three models, batches of every API, then a finished 100-item and 50 000-item batch
written into the database. Each page is fetched ``--samples`` times (after 2 warm-up fetches) by one
signed-in client over loopback, one request at a time; the time is the client's (request sent →
whole body read), so it is the server's render time plus a loopback round trip (the static baseline
shows that floor). It prints the median and the 90th percentile. A benchmark, not a test.

    .venv/bin/python bench/dashboard_pages.py [--samples 20] [--per-minute 100] [--backend sqlite]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from tests.e2e.dashboard.demo_data import big_batches, running_relay, seed  # noqa: E402
from tests.fixtures.relay_server import ADMIN_TOKEN  # noqa: E402

from common import machine_line, markdown_table  # noqa: E402

ASSET = re.compile(r'(?:href|src)="(/ui/static/[^"]+)"')


def signed_in(base_url: str) -> httpx.Client:
    client = httpx.Client(base_url=base_url, timeout=120)
    form = client.get("/ui/signin").text
    csrf = re.search(r'name="csrf" value="([^"]+)"', form)
    assert csrf is not None, form
    answer = client.post("/ui/signin", data={"admin_token": ADMIN_TOKEN, "csrf": csrf.group(1)})
    assert answer.status_code == 303, answer.text
    return client


def timed(client: httpx.Client, path: str, samples: int) -> tuple[bytes, list[float]]:
    for _ in range(2):
        client.get(path)
    times, body = [], b""
    for _ in range(samples):
        started = time.perf_counter()
        answer = client.get(path)
        body = answer.content
        times.append(time.perf_counter() - started)
        assert answer.status_code == 200, (path, answer.status_code, answer.text[:300])
    return body, times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--per-minute", type=int, default=100)
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    args = parser.parse_args()

    with running_relay(args.backend) as gw:
        started = time.perf_counter()
        demo = seed(gw, per_minute=args.per_minute)
        small, large = big_batches(gw)
        print(
            f"seeded in {time.perf_counter() - started:.0f} s: {demo.events:,} usage events"
            f" ({args.per_minute} a minute in the last hour, in waves), batches of every API,"
            " a 100-item and a 50 000-item batch"
        )
        base = gw.relay.control_url
        anonymous = httpx.Client(base_url=base, timeout=60)
        admin = signed_in(base)
        pages = [
            ("baseline: relay.css (static)", anonymous, "/ui/static/relay.css"),
            ("baseline: sign-in page", anonymous, "/ui/signin"),
            ("overview", admin, "/ui/"),
            ("usage", admin, "/ui/usage"),
            ("usage by model", admin, "/ui/usage?group_by=model"),
            ("batches list", admin, "/ui/batches"),
            ("batch, 100 items", admin, f"/ui/batches/{small}"),
            ("batch, 50 000 items", admin, f"/ui/batches/{large}"),
            ("batch, 50 000 items, failures only", admin, f"/ui/batches/{large}?state=discarded"),
        ]
        sizes: dict[str, int] = {}
        rows, floor = [], 0.0
        for name, client, path in pages:
            body, times = timed(client, path, args.samples)
            assets = sorted(set(ASSET.findall(body.decode())))
            for asset in assets:
                sizes.setdefault(asset, len(anonymous.get(asset).content))
            median = statistics.median(times)
            p90 = sorted(times)[max(0, int(len(times) * 0.9) - 1)]
            floor = floor or median
            rows.append(
                [
                    name,
                    f"{len(body) / 1024:.1f} KB",
                    f"{(len(body) + sum(sizes[a] for a in assets)) / 1024:.1f} KB" if assets else "–",
                    f"{median * 1000:.1f} ms",
                    f"{p90 * 1000:.1f} ms",
                    f"{median / floor:.1f}×",
                ]
            )
        anonymous.close()
        admin.close()
    print(machine_line())
    print(f"backend: {args.backend}; {args.samples} samples a page, one request at a time, over loopback")
    print(
        markdown_table(
            ["page", "HTML", "first visit (+ linked assets)", "median", "p90", "median vs relay.css"],
            rows,
            [False, True, True, True, True, True],
        )
    )


if __name__ == "__main__":
    main()
