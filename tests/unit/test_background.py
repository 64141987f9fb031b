"""relay.background: Services order, Loop start/stop idempotence, one backoff policy, failures retried.

Delays are measured in steps, never on the clock: each loop gets a recording pause that returns at
once (or blocks until released), so the tests see which waits a loop asked for, not how long it took.
"""

from __future__ import annotations

import asyncio
import logging
import math

import pytest

from relay.background import DONE, Backoff, Loop, PauseFor, Services, Stage


class RecordingPause:
    """Records every wait a loop asks for; returns at once unless ``hold`` is set."""

    def __init__(self) -> None:
        self.waits: list[float] = []
        self.hold = False
        self.entered = asyncio.Event()

    async def __call__(self, wake: asyncio.Event, seconds: float) -> None:
        self.waits.append(seconds)
        self.entered.set()
        if self.hold:
            await wake.wait()
        await asyncio.sleep(0)


class Steps:
    """A step that fails ``failures`` times (a list of bools: True = raise), then succeeds; DONE after
    ``until`` calls."""

    def __init__(self, outcomes: list[bool], until: int | None = None) -> None:
        self.outcomes = list(outcomes)
        self.calls = 0
        self.until = until if until is not None else len(outcomes)

    async def __call__(self) -> object:
        self.calls += 1
        fail = self.outcomes[self.calls - 1] if self.calls <= len(self.outcomes) else False
        if fail:
            raise ConnectionError(f"failure {self.calls}")
        return DONE if self.calls >= self.until else None


def test_backoff_grows_to_its_cap_and_resets() -> None:
    backoff = Backoff(0.1, 1.0)
    assert [backoff.next() for _ in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    backoff.reset()
    assert backoff.next() == 0.1


def test_backoff_with_equal_bounds_is_constant_and_bad_bounds_are_refused() -> None:
    backoff = Backoff(2.0, 2.0)
    assert [backoff.next() for _ in range(3)] == [2.0, 2.0, 2.0]
    with pytest.raises(ValueError):
        Backoff(2.0, 1.0)


async def test_a_failing_step_is_retried_after_growing_delays_reset_by_a_success() -> None:
    pause = RecordingPause()
    step = Steps([True, True, True, False, True, False], until=6)
    loop = Loop("test-loop", step, every_s=5.0, backoff=Backoff(0.5, 1.5), pause=pause)
    await loop.start()
    assert await loop.finished(timeout_s=30)
    assert step.calls == 6
    # three failures: 0.5, 1.0, 1.5 (capped); a success: the period; a failure: back to 0.5.
    assert pause.waits == [0.5, 1.0, 1.5, 5.0, 0.5]


async def test_each_failure_is_reported_once_with_the_loop_name(caplog: pytest.LogCaptureFixture) -> None:
    step = Steps([True, True, False])
    loop = Loop("relay-test-loop", step, backoff=Backoff(0.1, 0.1), pause=RecordingPause())
    with caplog.at_level(logging.WARNING, logger="relay.background"):
        await loop.start()
        assert await loop.finished(timeout_s=30)
    failures = [r.getMessage() for r in caplog.records if r.name == "relay.background"]
    assert len(failures) == 2
    assert all(m.startswith("relay-test-loop failed (ConnectionError") for m in failures)


async def test_a_custom_report_replaces_the_default_log() -> None:
    seen: list[tuple[str, str, float]] = []
    step = Steps([True, False])
    loop = Loop(
        "reported",
        step,
        backoff=Backoff(0.3, 0.3),
        report=lambda name, exc, delay: seen.append((name, str(exc), delay)),
        pause=RecordingPause(),
    )
    await loop.start()
    assert await loop.finished(timeout_s=30)
    assert seen == [("reported", "failure 1", 0.3)]


async def test_a_step_may_choose_the_next_pause() -> None:
    pause = RecordingPause()
    paces = iter([PauseFor(0.25), None, PauseFor(0.0), DONE])

    async def step() -> object:
        return next(paces)

    loop = Loop("paced", step, every_s=1.0, pause=pause)
    await loop.start()
    assert await loop.finished(timeout_s=30)
    assert pause.waits == [0.25, 1.0]  # a pause of 0 is no pause


async def test_an_endless_pause_lasts_until_the_next_wake() -> None:
    steps: list[str] = []

    async def step() -> object:
        steps.append("step")
        return PauseFor(math.inf) if len(steps) == 1 else DONE

    loop = Loop("quiet", step, every_s=0.01)
    await loop.start()
    for _ in range(20):  # many turns of the event loop: a timed pause of 0.01 s would have ended
        await asyncio.sleep(0.005)
    assert steps == ["step"] and loop.running
    loop.wake()
    assert await loop.finished(timeout_s=30)
    assert steps == ["step", "step"]


async def test_wait_first_pauses_before_the_first_step() -> None:
    first, later = RecordingPause(), RecordingPause()
    waiting = Loop("first", Steps([False]), every_s=2.0, wait_first=True, pause=first)
    eager = Loop("eager", Steps([False]), every_s=2.0, pause=later)
    await waiting.start()
    await eager.start()
    assert await waiting.finished(timeout_s=30) and await eager.finished(timeout_s=30)
    assert first.waits == [2.0]
    assert later.waits == []


async def test_start_and_stop_are_idempotent_and_stop_cancels_the_step() -> None:
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def forever() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    loop = Loop("forever", forever)
    await loop.stop()  # never started: a no-op
    await loop.start()
    await loop.start()  # already running: the same task
    await asyncio.wait_for(started.wait(), 30)
    assert loop.running
    await loop.stop()
    assert cancelled.is_set() and not loop.running
    await loop.stop()  # already stopped: a no-op
    assert not loop.running


async def test_stop_during_a_backoff_wait_returns_without_waiting_it_out() -> None:
    pause = RecordingPause()
    pause.hold = True  # the backoff wait never ends by itself
    loop = Loop("outage", Steps([True] * 10), backoff=Backoff(3600.0, 3600.0), pause=pause)
    await loop.start()
    await asyncio.wait_for(pause.entered.wait(), 30)
    assert pause.waits == [3600.0]
    await asyncio.wait_for(loop.stop(), 30)
    assert not loop.running


async def test_wake_ends_a_pause_and_a_done_loop_can_be_launched_again() -> None:
    pause = RecordingPause()
    pause.hold = True
    step = Steps([False, False], until=2)
    loop = Loop("woken", step, every_s=3600.0, pause=pause)
    await loop.start()
    await asyncio.wait_for(pause.entered.wait(), 30)
    assert step.calls == 1
    loop.wake()
    assert await loop.finished(timeout_s=30)
    assert step.calls == 2
    step.until = 3
    loop.launch()
    assert await loop.finished(timeout_s=30)
    assert step.calls == 3


class Recorder:
    def __init__(self, name: str, log: list[str], fail_stop: bool = False) -> None:
        self.name = name
        self.log = log
        self.fail_stop = fail_stop

    async def start(self) -> None:
        self.log.append(f"start {self.name}")

    async def stop(self) -> None:
        self.log.append(f"stop {self.name}")
        if self.fail_stop:
            raise RuntimeError(self.name)


async def test_services_start_in_order_stop_in_reverse_and_once() -> None:
    log: list[str] = []
    services = Services([Recorder("a", log), Recorder("b", log)])
    services.add(Recorder("c", log))
    await services.start()
    await services.start()
    await services.stop()
    await services.stop()
    assert log == ["start a", "start b", "start c", "stop c", "stop b", "stop a"]


async def test_a_failing_stop_does_not_skip_the_others() -> None:
    log: list[str] = []
    services = Services([Recorder("a", log), Recorder("b", log, fail_stop=True), Recorder("c", log)])
    await services.start()
    with pytest.raises(RuntimeError, match="b"):
        await services.stop()
    assert log[-3:] == ["stop c", "stop b", "stop a"]


async def test_a_stage_runs_its_callables_once_per_start_and_stop() -> None:
    log: list[str] = []

    async def opened() -> None:
        log.append("open")

    async def closed() -> None:
        log.append("close")

    stage = Stage("pool", opened, closed)
    await stage.stop()  # not started: nothing to close
    await stage.start()
    await stage.start()
    await stage.stop()
    await stage.stop()
    await Stage("close only", stop=closed).start()
    assert log == ["open", "close"]


async def test_a_failing_start_stops_what_started_before_it() -> None:
    log: list[str] = []

    class Broken(Recorder):
        async def start(self) -> None:
            raise OSError("no database")

    services = Services([Recorder("a", log), Recorder("b", log), Broken("c", log), Recorder("d", log)])
    with pytest.raises(OSError):
        await services.start()
    assert log == ["start a", "start b", "stop b", "stop a"]
    await services.stop()  # nothing left to stop
    assert log == ["start a", "start b", "stop b", "stop a"]
