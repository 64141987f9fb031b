"""A listener's uvicorn server ticks once a second, not ten times (each tick wakes an idle process), still
refreshes the ``date`` header at every tick, and stops at once when ``should_exit`` is set."""

from __future__ import annotations

import asyncio

from relay.cli.serve import _listener, inference_error
from relay.config import load_settings


async def test_the_server_ticks_once_a_second_and_stops_when_told() -> None:
    settings = load_settings({"RELAY_PORT": "18080", "RELAY_CONTROL_PORT": "18081"})
    server = _listener(lambda *_: None, settings, 18080, inference_error, client_address=False)  # type: ignore[arg-type]
    server.config.load()
    ticks: list[int] = []
    on_tick = server.on_tick

    async def counted(counter: int) -> bool:
        ticks.append(counter)
        return await on_tick(counter)

    server.on_tick = counted  # type: ignore[method-assign]
    assert server.should_exit is False
    main_loop = asyncio.create_task(server.main_loop())
    await asyncio.sleep(0.45)  # uvicorn's own loop ticks every 0.1 s: four or five times by now
    assert ticks == [0]  # the first tick only
    assert [name for name, _ in server.server_state.default_headers] == [b"date", b"server"]
    server.should_exit = True
    await asyncio.wait_for(main_loop, timeout=30)  # woken by should_exit, not by its next tick
    assert ticks == [0, 0]  # a multiple of 10 each time: every tick refreshes the date header
