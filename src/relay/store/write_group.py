"""One SQLite connection whose write transactions the batch engine's tasks share: group commit.

Why. SQLite lets one connection at a time hold a file's write lock. The batch engine's dispatcher
(claims), starter and finalizer each took it with a ``BEGIN IMMEDIATE`` of their own, on connections of
their own; when two met, the loser slept in SQLite's busy handler (1, 2, 5, 10 … ms, and not woken
when the lock frees) — tens of milliseconds per item cycle at 16 workers, and every transaction paid
its own BEGIN and COMMIT. Here they take *turns* on ONE connection instead: a writer task opens a
transaction, lets the turns waiting at that moment run one after another inside it (each after the
first in a SAVEPOINT of its own), and commits once for all of them. Within the process nobody sleeps
in the busy handler, and a claim, a start group and a finalize group that meet share one BEGIN and
one COMMIT.

What it deliberately does not know. SQL: a turn is handed a connection inside the group's transaction
and runs the batch queue's statements as it would in a transaction of its own
(``relay.store.batch_queue._txn.write_txn`` joins the open transaction). Postgres never uses it (its
writers lock rows, not the file: ``relay.store.held``).

Invariants.
* A turn's ``async with group.use() as conn`` exits only once the transaction holding its writes has
  committed, or raises when that transaction failed (nothing of the turn is then committed): a caller
  acts on what its statements returned only once it is committed, as with a transaction of its own.
* A turn whose body raises is rolled back alone and re-raises; the other turns of its group still
  commit. The first turn of a transaction runs in the transaction itself (rolling that back undoes
  this turn alone), each later one in a SAVEPOINT. A turn cancelled while its statements ran leaves
  the connection in an unknown state: the whole group is rolled back and the connection discarded
  (the others get :class:`GroupAborted`, a transient error their loops retry).
* One turn at a time on the connection; a group takes at most ``max_turns`` turns (those waiting when
  it opened), so a steady stream of turns still commits regularly.
* Urgent turns (:attr:`WriteGroup.urgent`, the starter's: a worker slot waits for each) go before the
  others; one that arrives while a group runs goes next in it, and that group commits right after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncTransaction

from relay.background import Backoff, Loop
from relay.store.held import Turns

log = logging.getLogger("relay.store")

MAX_TURNS = 16  # turns per transaction (a worker pool has three writers; more only in tests)


class GroupAborted(ConnectionAbortedError):
    """The shared transaction this turn's writes were in was rolled back (another turn was cancelled
    mid-statement, or the connection failed): nothing of the turn was committed. A transient error
    (an ``OSError``): retrying the turn is the right answer."""


class _Turn:
    """One caller's use of the connection: granted (the connection, or why not), finished (the body's
    outcome: None or what it raised), settled (None once committed, else why not). Outcomes are kept
    as values, so a future nobody awaits any more never logs an unretrieved exception."""

    __slots__ = ("finished", "granted", "settled")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.granted: asyncio.Future[AsyncConnection | BaseException] = loop.create_future()
        self.finished: asyncio.Future[BaseException | None] = loop.create_future()
        self.settled: asyncio.Future[BaseException | None] = loop.create_future()

    def grant(self, outcome: AsyncConnection | BaseException) -> bool:
        """Hand the turn its connection (or the reason it gets none); False if its caller left."""
        if self.granted.done():
            return False
        self.granted.set_result(outcome)
        return True

    def settle(self, outcome: BaseException | None) -> None:
        if not self.settled.done():
            self.settled.set_result(outcome)


class WriteGroup:
    """The turns of one replica's batch tasks, grouped into shared SQLite transactions (module
    docstring). :meth:`open` starts its writer task; :meth:`close` stops it."""

    def __init__(self, engine: AsyncEngine, *, max_turns: int = MAX_TURNS) -> None:
        if engine.dialect.name != "sqlite":
            raise ValueError("a write group is for SQLite; Postgres writers lock rows, not the file")
        self._engine = engine
        self._max_turns = max_turns
        self._conn: AsyncConnection | None = None
        self._urgent: deque[_Turn] = deque()
        self._queue: deque[_Turn] = deque()
        self._arrived = asyncio.Event()
        self._inflight: list[_Turn] = []  # the turns of the group being written
        self._closed = False
        self._loop = Loop("batch-write-group", self._group, backoff=Backoff(0.2, 5.0))

    @property
    def urgent(self) -> Turns:
        """The same group for a task whose turn holds work up (the starter: a worker slot waits for
        it): its turns go before the others, in a transaction of their own."""
        return _Urgent(self)

    def open(self) -> None:
        self._closed = False
        self._loop.launch()

    async def close(self) -> None:
        """Stop the writer: turns still waiting are refused; the connection is given back."""
        self._closed = True
        await self._loop.stop()
        for queue in (self._urgent, self._queue):
            while queue:
                queue.popleft().grant(GroupAborted("the batch write group is closed"))
        await self._discard()

    def use(self) -> AbstractAsyncContextManager[AsyncConnection]:
        """A turn: the connection inside the group's transaction, for the body's statements; exits
        once they are committed (module docstring)."""
        return self._turn(self._queue)

    @contextlib.asynccontextmanager
    async def _turn(self, queue: deque[_Turn]) -> AsyncIterator[AsyncConnection]:
        if self._closed:
            raise GroupAborted("the batch write group is closed")
        turn = _Turn(asyncio.get_running_loop())
        queue.append(turn)
        self._arrived.set()
        try:
            granted = await turn.granted
        except asyncio.CancelledError:
            if turn.granted.done() and not turn.granted.cancelled():
                turn.finished.set_result(None)  # granted but never used: nothing to roll back
            raise
        if isinstance(granted, BaseException):
            raise granted
        try:
            yield granted
        except BaseException as exc:
            turn.finished.set_result(exc)
            raise
        turn.finished.set_result(None)
        failure = await asyncio.shield(turn.settled)
        if failure is not None:
            raise failure

    async def _group(self) -> None:
        """The writer's step: one transaction for the urgent turns waiting now, else for the others
        (none: wait for one)."""
        queue = self._urgent or self._queue
        if not queue:
            await self._arrived.wait()
            self._arrived.clear()
            return
        turns = self._inflight = [queue.popleft() for _ in range(min(len(queue), self._max_turns))]
        try:
            await self._run_group(turns, queue)
        except BaseException as exc:  # cancelled (close) or a bug: no turn of the group may hang
            lost = exc if isinstance(exc, Exception) else GroupAborted("the batch write group stopped")
            for turn in self._inflight:
                turn.grant(lost)
                turn.settle(lost)
            await self._discard()
            raise

    async def _run_group(
        self,
        turns: list[_Turn],
        queue: deque[_Turn],
        txn: AsyncTransaction | None = None,
        ran: list[_Turn] | None = None,
    ) -> None:
        """Run the turns in one transaction (``txn``, when the group already opened one and ran the
        turns ``ran`` in it) and commit it. The first turn runs in the transaction itself (rolling it
        back undoes that turn alone); later ones each in a savepoint."""
        try:
            conn = await self._connection()
        except Exception as exc:  # the file cannot be opened
            for turn in turns:
                turn.grant(exc)
            return
        ran = [] if ran is None else ran
        failure: BaseException | None = None
        for position, turn in enumerate(turns):
            if turn.granted.done():  # its caller left while waiting
                continue
            if queue is not self._urgent and self._urgent:
                # An urgent turn came meanwhile: it runs next, in this transaction, which then
                # commits; the turns not run yet go first in the next group.
                queue.extendleft(reversed(turns[position:]))
                urgent = [self._urgent.popleft() for _ in range(len(self._urgent))]
                self._inflight += urgent
                await self._run_group(urgent, self._urgent, txn, ran)
                return
            try:
                if txn is None:
                    txn = await conn.begin()  # BEGIN IMMEDIATE: may wait in the busy handler
                    scope: AsyncTransaction = txn
                else:
                    scope = await conn.begin_nested()
            except Exception as exc:  # the lock stayed busy past the timeout, the file is gone …
                turn.grant(exc)
                failure = exc
            else:
                failure = await self._run_turn(turn, scope, scope is txn, ran)
                if scope is txn and txn is not None and not txn.is_active:
                    txn = None  # the first turn failed alone: the next one begins afresh
            if failure is not None:
                queue.extendleft(reversed(turns[position + 1 :]))  # not run: the next group
                break
        if failure is None and txn is not None:
            failure = await _commit(txn)
        if failure is not None:
            await self._discard()
        for turn in ran:
            turn.settle(failure)

    async def _run_turn(
        self, turn: _Turn, scope: AsyncTransaction, root: bool, ran: list[_Turn]
    ) -> BaseException | None:
        """Run one turn in ``scope`` (the transaction itself when ``root``, else a savepoint): kept on
        success, rolled back if its body raised. A failure returned means the whole group is lost."""
        assert self._conn is not None
        turn.grant(self._conn)
        outcome = await asyncio.shield(turn.finished)
        if isinstance(outcome, asyncio.CancelledError):
            return GroupAborted("a turn of the batch write group was cancelled mid-statement")
        try:
            if outcome is None:
                ran.append(turn)  # settled with the group's outcome
                if not root:
                    await scope.commit()  # RELEASE the savepoint: kept for the group's COMMIT
            else:
                await scope.rollback()  # its writes undone; its caller re-raised its own error
        except Exception as exc:
            return exc
        return None

    async def _connection(self) -> AsyncConnection:
        if self._conn is None:
            conn = await self._engine.connect()
            self._conn = await conn.execution_options(sqlite_begin="IMMEDIATE")
        return self._conn

    async def _discard(self) -> None:
        """Give the connection back, rolled back; it is never reused in an unknown state."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        with contextlib.suppress(Exception):
            await conn.invalidate()
        with contextlib.suppress(Exception):
            await conn.close()


class _Urgent:
    __slots__ = ("_group",)

    def __init__(self, group: WriteGroup) -> None:
        self._group = group

    def use(self) -> AbstractAsyncContextManager[AsyncConnection]:
        return self._group._turn(self._group._urgent)


async def _commit(txn: AsyncTransaction) -> BaseException | None:
    try:
        await txn.commit()
    except Exception as exc:
        log.warning("a batch write group's commit failed (%s); its turns retry", type(exc).__name__)
        return exc
    return None
