"""Many wrong login guesses at once against real ``relay serve`` processes, from a loopback address of
their own (``127.x.y.z``: Linux routes all of ``127.0.0.0/8`` to ``lo``), so the per-address counts of
one test start empty whatever other tests of the module sent from ``127.0.0.1``.

What it does not know: the throttle's limits; callers assert on the status codes it returns.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx


def fresh_loopback_address() -> str:
    """A loopback address no other test uses (in practice): 127.1–254.x.y."""
    rng = random.SystemRandom()
    return f"127.{rng.randint(1, 254)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"


def client_from(address: str) -> httpx.Client:
    """An HTTP client whose connections leave from ``address``."""
    return httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=60)


def guesses_at_once(control_urls: list[str], email: str, count: int, address: str) -> Counter[int]:
    """``count`` wrong-password logins for ``email`` released together (spread over ``control_urls``
    in turn), each on its own connection from ``address``; how many got each status code."""
    barrier = threading.Barrier(count)

    def guess(n: int) -> int:
        with client_from(address) as client:
            url = f"{control_urls[n % len(control_urls)]}/api/auth/login"
            barrier.wait(timeout=60)
            return client.post(url, json={"email": email, "password": "nope"}).status_code

    with ThreadPoolExecutor(max_workers=count) as pool:
        return Counter(pool.map(guess, range(count)))
