"""Background services: what every long-lived loop of a relay process is built on.

A :class:`Service` is anything the runtime starts at boot and stops at shutdown; ``start`` and
``stop`` are idempotent (starting a started service, or stopping a stopped one, does nothing), so the
runtime can stop everything in reverse order after a partial start, and a caller that stops a service
early (SIGTERM drains the batch workers first) needs no flag. :class:`Services` is that ordered list
(itself a service, so a group — the worker pool with its liveness — nests in it); :class:`Stage` makes
a service of a start-up step or of something with its own open/close names (the engine, a client).

A :class:`Loop` is one named asyncio task that calls one step function again and again: it pauses
``every_s`` between steps (cut short by :meth:`Loop.wake`), and after a step that raised it logs the
failure once, with its name, and waits the next delay of its :class:`Backoff` (exponential with a
cap, reset by the next step that succeeds) before calling the step again. A step may ask for another
pause before the next step by returning :class:`PauseFor`. ``stop`` cancels the task
(a pause or a backoff wait ends at once) and awaits it. A step that returns :data:`DONE` ends the task;
``launch`` starts it again (loops that run only while they have work: the lease renewer, the Redis
probe).

What it deliberately does not know: what a step does, which errors are worth a retry (a step catches
what it handles itself and lets the rest out), or what a service must finish before it stops (a
service's own ``stop`` flushes or drains, then stops its loops).

Invariants. At most one task per loop. A loop never ends because a step failed: only ``stop`` (or a
step returning :data:`DONE`) ends it. Cancellation is never treated as a failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Final, Protocol

log = logging.getLogger("relay.background")


class Service(Protocol):
    """Something the runtime starts and stops; both idempotent."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class Services:
    """Services started in the order given and stopped in the reverse one (each stop runs even if an
    earlier one raised; the first failure is raised after all ran). A start that fails stops the
    services started before it, in reverse, then raises (as an ``AsyncExitStack`` would)."""

    def __init__(self, services: Iterable[Service] = ()) -> None:
        self._services: list[Service] = list(services)
        self._started: list[Service] = []

    def add(self, service: Service) -> None:
        self._services.append(service)

    async def start(self) -> None:
        for service in self._services:
            if service not in self._started:
                try:
                    await service.start()
                except BaseException:
                    with contextlib.suppress(Exception):
                        await self.stop()
                    raise
                self._started.append(service)

    async def stop(self) -> None:
        failure: BaseException | None = None
        while self._started:
            service = self._started.pop()
            try:
                await service.stop()
            except Exception as exc:
                log.exception("stopping %r failed", service)
                failure = failure or exc
        if failure is not None:
            raise failure


class Stage:
    """A :class:`Service` made of two callables, for what has its own open/close names (an engine, a
    client pool) or is a start-up step (migrate) rather than a loop. Each runs once per start/stop."""

    def __init__(
        self,
        name: str,
        start: Callable[[], Awaitable[object]] | None = None,
        stop: Callable[[], Awaitable[object]] | None = None,
    ) -> None:
        self.name = name
        self._start = start
        self._stop = stop
        self._started = False

    async def start(self) -> None:
        if not self._started:
            if self._start is not None:
                await self._start()
            self._started = True

    async def stop(self) -> None:
        if self._started:
            self._started = False
            if self._stop is not None:
                await self._stop()

    def __repr__(self) -> str:
        return f"Stage({self.name!r})"


class Backoff:
    """Exponential delays with a cap: ``first_s``, then doubled (``factor``) up to ``max_s``; ``reset``
    after a success. ``first_s == max_s`` is a constant delay (a periodic loop's "next pass")."""

    __slots__ = ("_delay", "_factor", "first_s", "max_s")

    def __init__(self, first_s: float, max_s: float, *, factor: float = 2.0) -> None:
        if first_s < 0 or max_s < first_s or factor < 1:
            raise ValueError("a backoff needs 0 <= first_s <= max_s and factor >= 1")
        self.first_s = first_s
        self.max_s = max_s
        self._factor = factor
        self._delay = first_s

    def next(self) -> float:
        """The delay to wait after this failure (the one after it is longer, up to the cap)."""
        delay = self._delay
        self._delay = min(self._delay * self._factor, self.max_s)
        return delay

    def reset(self) -> None:
        self._delay = self.first_s


class _Done:
    __slots__ = ()

    def __repr__(self) -> str:
        return "DONE"


#: What a step returns to end its loop's task (nothing left to do; ``launch`` starts it again).
DONE: Final = _Done()


@dataclass(frozen=True, slots=True)
class PauseFor:
    """What a step returns to pause this long (still cut short by ``wake``) instead of ``every_s``
    before the next step: a loop whose pace depends on what the step found. ``math.inf`` pauses until
    the next ``wake``."""

    seconds: float


Step = Callable[[], Awaitable[object]]
#: ``(loop name, the failure, the delay before the retry)``: logs one failure.
FailureReport = Callable[[str, BaseException, float], None]
#: ``(wake event, seconds)``: wait until the event is set or the seconds passed (tests inject one).
Pause = Callable[[asyncio.Event, float], Awaitable[None]]


def log_failure(name: str, exc: BaseException, delay: float) -> None:
    """The default report: one warning naming the loop, the error and the wait before the retry."""
    log.warning("%s failed (%s: %s); retrying in %.1f s", name, type(exc).__name__, exc, delay)


async def pause_or_wake(wake: asyncio.Event, seconds: float) -> None:
    if wake.is_set():
        return
    if math.isinf(seconds):  # ``PauseFor(math.inf)``: until woken
        await wake.wait()
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(wake.wait(), seconds)


class Loop:
    """A named task calling ``step`` until stopped (see the module docstring)."""

    def __init__(
        self,
        name: str,
        step: Step,
        *,
        every_s: float = 0.0,
        wait_first: bool = False,
        backoff: Backoff | None = None,
        report: FailureReport = log_failure,
        pause: Pause = pause_or_wake,
    ) -> None:
        self.name = name
        self._step = step
        self._every_s = every_s
        self._wait_first = wait_first
        self.backoff = backoff if backoff is not None else Backoff(every_s, every_s)
        self._report = report
        self._pause = pause
        self._woken = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def launch(self) -> None:
        """Start the task unless it runs (needs a running event loop; callable from sync code)."""
        if not self.running:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=self.name)

    async def start(self) -> None:
        self.launch()

    def wake(self) -> None:
        """End the current (or the next) pause or backoff wait at once."""
        self._woken.set()

    async def finished(self, timeout_s: float | None) -> bool:
        """Wait up to ``timeout_s`` for the task to end by itself (a step returned :data:`DONE`);
        True when it did (or was not running); ``None`` waits as long as it takes. The task is not
        cancelled."""
        task = self._task
        if task is None or task.done():
            return True
        done, _ = await asyncio.wait({task}, timeout=timeout_s)
        return bool(done)

    async def stop(self) -> None:
        """Cancel the task and await it; a no-op when not running."""
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def _run(self) -> None:
        delay = self._every_s if self._wait_first else 0.0
        while True:
            if delay > 0 or self._woken.is_set():
                await self._pause(self._woken, delay)
                self._woken.clear()
            try:
                outcome = await self._step()
            except Exception as exc:
                delay = self.backoff.next()
                self._report(self.name, exc, delay)
                continue
            self.backoff.reset()
            if outcome is DONE:
                return
            delay = outcome.seconds if isinstance(outcome, PauseFor) else self._every_s
