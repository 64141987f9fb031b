"""Fair share across projects (SPEC §17) on real SQLite and Postgres: claims take turns across projects
first, then across a project's batches (never served, then oldest first), then idx order; with P
projects waiting, each project's next claim comes within P claims; several claimants keep to it.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.store.tables import batch_items as I
from tests.integration.batches import queue_ops
from tests.integration.batches.queue_helpers import available, claim_run, complete, submit


async def served(engine: AsyncEngine, claims: int, limit: int) -> list[tuple[str, list[int]]]:
    """``claims`` claims in a row: each one's batch and idxs."""
    rounds = [await claim_run(engine, "r1", limit) for _ in range(claims)]
    return [(r[0].batch_id, [c.idx for c in r]) for r in rounds]


async def test_projects_take_turns_then_their_batches_then_idxs(engine: AsyncEngine) -> None:
    a1, a2, a3 = [await submit(engine, 20, project_id="prj_a") for _ in range(3)]
    b1 = await submit(engine, 20, project_id="prj_b")
    c1 = await submit(engine, 20, project_id="prj_c")

    order = await served(engine, 10, 4)

    # Project A has three batches, B and C one each: A does not get three turns to their one.
    assert order == [
        (a1, [0, 1, 2, 3]),
        (b1, [0, 1, 2, 3]),
        (c1, [0, 1, 2, 3]),
        (a2, [0, 1, 2, 3]),  # A's next batch: never served before the one served already
        (b1, [4, 5, 6, 7]),
        (c1, [4, 5, 6, 7]),
        (a3, [0, 1, 2, 3]),
        (b1, [8, 9, 10, 11]),
        (c1, [8, 9, 10, 11]),
        (a1, [4, 5, 6, 7]),  # then A's batches again, the one served longest ago first
    ]


async def test_each_waiting_project_is_claimed_within_p_claims(engine: AsyncEngine) -> None:
    """Until every item is claimed: between two claims of one project, every other project that still
    had items waiting was claimed once, and no project was claimed twice (round-robin)."""
    sizes = {"prj_a": [30, 30, 30, 30], "prj_b": [9], "prj_c": [25, 5], "prj_d": [14]}
    left: Counter[str] = Counter()
    for project, batch_sizes in sizes.items():
        for size in batch_sizes:
            await submit(engine, size, project_id=project)
            left[project] += size
    claimed_projects: list[str] = []
    last_turn: dict[str, tuple[int, int]] = {}  # project → (its last claim, projects waiting then)
    while claimed := await claim_run(engine, "r1", 3):
        project = claimed[0].batch.project_id
        if project in last_turn:
            at, waiting_then = last_turn[project]
            between = claimed_projects[at + 1 :]
            assert len(between) == len(set(between)), claimed_projects  # nobody twice in between
            assert len(between) < waiting_then, (project, claimed_projects)  # within P claims
        last_turn[project] = (len(claimed_projects), sum(1 for n in left.values() if n))
        claimed_projects.append(project)
        left[project] -= len(claimed)
    assert sum(left.values()) == 0
    assert await available(engine) == 0


async def test_a_project_keeps_its_turn_when_its_batch_finishes(engine: AsyncEngine) -> None:
    """A project whose batch finished and that submits another one does not jump ahead of a project
    that has been waiting since: its turn is the project's, not the batch's."""
    other = await submit(engine, 20, project_id="prj_b")
    first = await submit(engine, 2, project_id="prj_a")
    assert (await claim_run(engine, "r1", 5))[0].batch_id == other  # B's turn, then A's
    claimed = await claim_run(engine, "r1", 5)
    assert [c.batch_id for c in claimed] == [first, first]
    for item in claimed:
        assert await complete(engine, "r1", item)
    second = await submit(engine, 10, project_id="prj_a")

    order = await served(engine, 3, 5)

    assert [batch for batch, _ in order] == [other, second, other]


async def test_a_claim_skipping_held_policies_keeps_the_project_order(engine: AsyncEngine) -> None:
    """A project whose only batch is held back by pacing is passed over; the others keep their turns."""
    held = await submit(engine, 5, project_id="prj_a", policy_id="pol_held")
    b1 = await submit(engine, 5, project_id="prj_b")
    c1 = await submit(engine, 5, project_id="prj_c")

    picked = [
        (await queue_ops.claim(engine, "r1", 2, skip_policies=["pol_held"]))[0].batch_id for _ in range(3)
    ]
    assert picked == [b1, c1, b1]
    assert (await queue_ops.claim(engine, "r1", 2))[0].batch_id == held  # never served: first now


async def test_concurrent_claimants_share_across_projects(
    engine: AsyncEngine, replica_engines: list[AsyncEngine]
) -> None:
    """Nine claimants on three engines: every item is claimed once, and two small projects are served
    to the end while a project with sixty batches still has most of its items waiting — fair share
    across projects, not across batches (which would serve the sixty batches first)."""
    projects = {await submit(engine, 5, project_id="prj_crowd"): "prj_crowd" for _ in range(60)}
    for project in ("prj_s1", "prj_s2"):
        projects[await submit(engine, 10, project_id=project)] = project
    seen: Counter[tuple[str, int]] = Counter()

    async def claimant(replica: AsyncEngine, name: str) -> None:
        while True:
            claimed = await queue_ops.claim(replica, name, 5)  # reserve only: claimed_at stays the claim's
            seen.update((c.batch_id, c.idx) for c in claimed)
            if not claimed and await unreserved(replica) == 0:
                return

    claimants = [(r, f"r{n}-{w}") for n, r in enumerate(replica_engines) for w in range(3)]
    await asyncio.gather(*(claimant(replica, name) for replica, name in claimants))

    assert set(seen) == {(b, i) for b in projects for i in range(5 if projects[b] == "prj_crowd" else 10)}
    assert set(seen.values()) == {1}
    # The claims in the order they were made (one claim: one claimant, one batch, one timestamp).
    claims = sorted(
        {(row["claimed_at"], row["claimed_by"], row["batch_id"]) for row in await reserved(engine)}
    )
    order = [projects[batch_id] for _, _, batch_id in claims]
    assert len(order) == 62 + 2
    # Each small project needs 2 claims. One claimant alone serves them by claim 6 (turns of 3
    # projects). Claimants running at once each pick before seeing the others' turns, so a project
    # waits up to one round of them per turn, and the first round (every project new, the crowd's
    # batches the oldest) may go to the crowd: 3 rounds. Batch turns alone would take 61 claims or more.
    last_small = max(i for i, project in enumerate(order) if project != "prj_crowd")
    assert last_small < 3 * (3 + len(claimants)), order


async def unreserved(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        query = select(func.count()).where(I.c.state == "available", I.c.claimed_by.is_(None))
        return int((await conn.execute(query)).scalar_one())


async def reserved(engine: AsyncEngine) -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        rows = await conn.execute(select(I).where(I.c.claimed_by.is_not(None)))
        return [dict(row._mapping) for row in rows]
