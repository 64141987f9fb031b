"""The OpenAI Batches façade's finalizing (SPEC §14): once every item of a §14 batch is final, its output
and error files are written and it becomes ``completed``, ``cancelled`` or ``expired``.

What it does. :func:`finalizing_hook` makes the finish hook (``relay.batches.hooks``, built in
``relay.boot``): inside the transaction that finishes a §14 batch it moves ``api_status`` from
``in_progress`` to ``finalizing`` (only a row write, as hooks must). :class:`EndEvents` holds the
webhooks' outbox (given to the hook and to :class:`OpenAIFinalizer`): it is called in the
transaction that gives a batch its end state (the finalizer's, or for a batch that failed validation
the create's), so its event is stored exactly once. :class:`OpenAIFinalizer` runs on every replica,
whatever ``RELAY_BATCH_WORKERS``: every
``RELAY_BATCH_FINALIZE_POLL_S`` it claims the ``finalizing`` batches — a compare-and-set of
``api_status`` to ``fin@<deadline>`` — writes their files through the Files service, then sets the
end state with the files' ids (another compare-and-set, from its own claim). A claim whose deadline
passed (its replica died or stalled) is claimed again, so a restart during finalizing still ends the
batch with its files.

What it deliberately does not know. How items ran, how file bytes are stored, HTTP.

:func:`output_files_remover` is what deleting a §14 batch (SPEC §17 retention, ``relay.batches.deleter``)
removes besides the engine's rows: the output and error files written here, never the uploaded input.

Invariants. Two replicas never both write a batch's files: a claim is one conditional UPDATE, and
the end state is only set from the claim that wrote the files (a replica that lost its claim removes
what it wrote). No file is written when it would be empty (its id stays null). Output lines are
completed items in line order; error lines every other item, in line order (SPEC §14).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, Protocol

from relay.background import Loop
from relay.batch_apis.files_service import FileService, OutputFile
from relay.batch_apis.openai_service import API, CLAIM_PREFIX, FAILED, FINALIZING, IN_PROGRESS, outcome_of
from relay.batches.hooks import FinishedBatch, FinishHook
from relay.batches.service import BatchService
from relay.domain.batch_record import BatchRecord
from relay.domain.batches import COMPLETED
from relay.domain.ids import mint_id
from relay.domain.openai_batches import error_line, output_line
from relay.store import batches as batch_store
from relay.store import facade_batches
from relay.store.engine import Connection, Engine

log = logging.getLogger("relay.batches")
LEASE_S: Final = 600  # how long a claim holds before another replica may take the batch over
PASS_BATCHES: Final = 20


class EndEvent(Protocol):
    """Called in the transaction that gives a §14 batch its end state (``relay.webhooks.outbox.enqueue``
    has this signature): ``event_type`` is ``batch.completed|cancelled|expired|failed``."""

    async def __call__(
        self,
        conn: Connection,
        *,
        batch_id: str,
        api: str,
        project_id: str,
        counts: Mapping[str, int],
        event_type: str,
    ) -> object: ...


class EndEvents:
    """What is called whenever a §14 batch reaches its end state, inside that transaction (the
    webhooks' outbox), fixed when the runtime is built (``relay.boot``): no module-level registry."""

    __slots__ = ("_callbacks",)

    def __init__(self, *callbacks: EndEvent) -> None:
        self._callbacks: tuple[EndEvent, ...] = callbacks

    async def ended(
        self, conn: Connection, batch_id: str, project_id: str, counts: Mapping[str, int], state: str
    ) -> None:
        for callback in self._callbacks:
            await callback(
                conn,
                batch_id=batch_id,
                api=API,
                project_id=project_id,
                counts=counts,
                event_type=f"batch.{state}",
            )


NO_END_EVENTS: Final = EndEvents()


def finalizing_hook(end_events: EndEvents = NO_END_EVENTS) -> FinishHook:
    """The finish hook (``relay.batches.hooks``): a finished §14 batch waits for its files (inside the
    finishing transaction); one that failed validation (finished at create, no item) has reached its
    end state (``end_events``)."""

    async def mark_finalizing(conn: Connection, finished: Sequence[FinishedBatch]) -> None:
        for batch in finished:
            if batch.api != API:
                continue
            if batch.api_status == IN_PROGRESS:
                await batch_store.set_api_state(
                    conn, batch.id, api_status=FINALIZING, only_if_status=IN_PROGRESS
                )
            elif batch.api_status == FAILED:
                await end_events.ended(conn, batch.id, batch.project_id, batch.counts, FAILED)

    return mark_finalizing


class OpenAIFinalizer:
    def __init__(
        self,
        engine: Engine,
        batches: BatchService,
        files: FileService,
        interval_s: float,
        lease_s: float = LEASE_S,
        *,
        end_events: EndEvents = NO_END_EVENTS,
    ) -> None:
        self._end_events = end_events
        self._engine = engine
        self._batches = batches
        self._files = files
        self._lease_s = lease_s
        self._loop = Loop(
            "openai-batch-finalizer", self.finalize_waiting, every_s=interval_s, wait_first=True
        )

    async def start(self) -> None:
        await self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()

    async def finalize_waiting(self) -> int:
        """Claim and finalize the batches waiting (or whose claim lapsed); how many this pass ended."""
        async with self._engine.connect() as conn:
            waiting = await facade_batches.waiting_to_finalize(
                conn, API, waiting=FINALIZING, prefix=CLAIM_PREFIX, limit=PASS_BATCHES
            )
        done = 0
        now = int(time.time())
        for batch_id, status in waiting:
            if status.startswith(CLAIM_PREFIX) and _deadline(status) > now:
                continue  # another replica (or this one) holds it
            claim = f"{CLAIM_PREFIX}{now + int(self._lease_s)}"
            async with self._engine.begin() as conn:
                if not await batch_store.set_api_state(
                    conn, batch_id, api_status=claim, only_if_status=status
                ):
                    continue  # someone else claimed it first
            if await self._finalize(batch_id, claim):
                done += 1
        return done

    async def _finalize(self, batch_id: str, claim: str) -> bool:
        async with self._engine.connect() as conn:
            row = await batch_store.get_batch(conn, batch_id)
            counts = (await batch_store.item_counts(conn, [batch_id]))[batch_id]
            expired = await batch_store.has_expired_items(conn, batch_id)
        assert row is not None
        data: dict[str, Any] = dict(row["api_data"] or {})
        owner = row["owner"]
        expires_after = data.get("output_expires_after_s")
        record = await self._batches.record(batch_id)
        files = _Files(self._files, owner, batch_id, expires_after)
        written = files.written
        try:
            await self._write(batch_id, record, files)
            for kind, file_id in (await files.finish()).items():
                data[f"{kind}_file_id"] = file_id
            data["ended_at"] = int(time.time())
            outcome = outcome_of(row, expired=expired)
            async with self._engine.begin() as conn:
                ended = await batch_store.set_api_state(
                    conn, batch_id, api_status=outcome, api_data=data, only_if_status=claim
                )
                if ended:  # the webhooks' event (SPEC §10.10), in the transaction of the end state
                    await self._end_events.ended(conn, batch_id, row["project_id"], counts, outcome)
        except BaseException:
            await files.abort()
            await self._remove(owner, written)
            await self._release(batch_id, claim)
            raise
        if not ended:
            log.warning(
                "lost the finalizing claim of batch %s; its files are written by another replica", batch_id
            )
            await self._remove(owner, written)
        return ended

    async def _write(self, batch_id: str, record: BatchRecord, files: _Files) -> None:
        """Every item in line order: completed ones to the output file, the others to the error file,
        both written as the result pages are read (neither is held in memory)."""
        async for page in self._batches.result_pages(record):
            async with self._engine.connect() as conn:
                request_ids = await facade_batches.request_ids(conn, batch_id, [row.idx for row, _ in page])
            for row, body in page:
                line_id = mint_id("batch_req")
                request_id = request_ids.get(row.idx, "")
                if row.state == COMPLETED:
                    line = output_line(line_id, row.custom_id, row.status or 200, request_id, body or b"null")
                    await files.write("output", line)
                else:
                    line = error_line(line_id, row.custom_id, row.error or "", row.status, request_id)
                    await files.write("error", line)

    async def _release(self, batch_id: str, claim: str) -> None:
        """Give a claim back after a failure, so the next pass (any replica's) retries at once."""
        try:
            async with self._engine.begin() as conn:
                await batch_store.set_api_state(conn, batch_id, api_status=FINALIZING, only_if_status=claim)
        except Exception as exc:  # the claim then lapses after its lease
            log.warning("could not release the finalizing claim of %s (%s)", batch_id, type(exc).__name__)

    async def _remove(self, owner: str, file_ids: list[str]) -> None:
        for file_id in file_ids:
            try:
                await self._files.remove(await self._files.get(owner, file_id))
            except Exception as exc:
                log.warning("could not remove file %s (%s)", file_id, type(exc).__name__)


class _Files:
    """A batch's output and error files, each begun at its first line (none when it would be empty)."""

    def __init__(self, service: FileService, owner: str, batch_id: str, expires_after_s: int | None) -> None:
        self._service, self._owner, self._batch_id = service, owner, batch_id
        self._expires_after_s = expires_after_s
        self._open: dict[str, OutputFile] = {}  # "output" | "error" → its file, in the order begun
        self.written: list[str] = []  # the ids of the files finished (to remove if the batch does not end)

    async def write(self, kind: str, line: bytes) -> None:
        output = self._open.get(kind)
        if output is None:
            output = self._open[kind] = await self._service.begin_output(self._owner)
        await output.write_line(line)

    async def finish(self) -> dict[str, str]:
        """``{"output"|"error": file id}`` of the files written; each id joins ``written`` as soon as
        its file is whole."""
        made: dict[str, str] = {}
        for kind in ("output", "error"):
            output = self._open.get(kind)
            if output is not None:
                name = f"{self._batch_id}_{kind}.jsonl"
                made[kind] = (await output.finish(filename=name, expires_after_s=self._expires_after_s))["id"]
                del self._open[kind]
                self.written.append(made[kind])
        return made

    async def abort(self) -> None:
        """Remove whatever is still being written."""
        while self._open:
            _, output = self._open.popitem()
            await output.abort()


def output_files_remover(files: FileService) -> Callable[[str, Mapping[str, Any] | None], Awaitable[int]]:
    """``(api, api_data) -> files removed``: a deleted §14 batch's output and error files (the ids its
    end state recorded), whoever owns them and expired or not; other APIs' batches have none."""

    async def remove(api: str, api_data: Mapping[str, Any] | None) -> int:
        if api != API or not api_data:
            return 0
        file_ids = [api_data.get(name) for name in ("output_file_id", "error_file_id")]
        return sum([await files.remove_any(file_id) for file_id in file_ids if isinstance(file_id, str)])

    return remove


def _deadline(status: str) -> int:
    digits = status[len(CLAIM_PREFIX) :]
    return int(digits) if digits.isdigit() else 0
