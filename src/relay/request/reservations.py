"""What a rate-limit admission hands back (SPEC §5, §17): the :class:`Reservation` commit needs, the
:class:`BlockGrant` of batch items admitted together, and the :class:`BatchRefused` a batch item meets.

It exists so the pipeline, the cache-hit path and the batch engine can carry a reservation or catch a
refusal by naming values only, apart from ``relay.request.ratelimit``'s :class:`RateLimiter` that makes
them. It deliberately holds no logic: values and the one shared empty reservation.
"""

from __future__ import annotations

from dataclasses import dataclass

from relay.errors import RateLimited


class BatchRefused(RateLimited):
    """A batch item found its policy's batch share of a rule spent, or ``batch.max_concurrency``
    reached (SPEC §17). A ``RateLimited``, so ``pacing: fail`` fails the item ``rate limit exceeded: ``
    as §10.4 says; under ``pacing: wait`` the batch engine holds the item back for ``retry_after``
    seconds. ``meter``: the refusing rule's meter (``max_concurrency`` for the lease)."""

    def __init__(
        self, message: str, *, retry_after: float, meter: str, share: int | None = None, exact: bool = False
    ) -> None:
        super().__init__(message, retry_after=retry_after)
        self.meter = meter
        self.share = share  # a ``requests`` rule's batch share: how many items its next window admits
        # ``retry_after`` is already at least 100 ms after the last try (SPEC §17), so it may be kept
        # as is: the batch engine knew the share was spent without asking again.
        self.exact = exact


@dataclass(frozen=True, slots=True)
class BlockGrant:
    """Batch items admitted together (:meth:`RateLimiter.reserve_batch_block`): ``granted`` of them,
    each to be sent before ``until`` (epoch seconds: the end of the plan's shortest window; an admission
    not used by then is void, since its window's count is spent)."""

    granted: int
    until: float
    full: bool = False  # the window's share is spent with this block (fewer than asked, or all of it)
    share: int = 0  # the tightest rule's batch share (items per window)


@dataclass(frozen=True, slots=True)
class Reservation:
    """What :meth:`RateLimiter.commit` needs: the lease to release and where to add tokens."""

    lease_id: str
    token_windows: tuple[tuple[str, int, str], ...]  # (state key, window_s, meter) for token meters
    concurrency_keys: tuple[str, ...]
    needs_cost: bool = False  # some window is a cost_usd budget: commit needs the call's priced cost


#: The reservation of every request that has nothing to commit (shared: the fast path allocates nothing).
EMPTY_RESERVATION = Reservation("", (), ())
