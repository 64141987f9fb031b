"""``relay batch …``: submit, watch, read and cancel batches over the inference plane.

What it does. ``submit FILE --shape S [--wait]`` reads JSONL or a JSON array, submits it and prints only
the batch id on stdout; with ``--wait`` a progress bar on stderr shows done / failed / cancelled counts
until every item is final, then one summary line that names failures and the command that lists them.
A file whose lines are Anthropic Message Batches requests (``{"custom_id", "params"}``, detected per
file, with or without ``--shape anthropic``) is submitted to the §15 API (its ``msgbatch_…`` id works
with every command here); plain Messages bodies (``--shape anthropic``) still go to ``/v1/batches``.
An OpenAI-format JSONL (``custom_id``/``method``/``url``/``body`` lines, detected per file: a file is
one format or the other, never a mix) is checked here line by line, then uploaded and created through
the OpenAI-compatible API (``/openai/v1/files``, ``/openai/v1/batches``; SPEC §14), so its custom ids
are kept; it prints the ``batch_…`` id. ``list`` prints the caller's batches of every API (§10.10);
``list --all`` every owner's, over the control API with the admin token. Results carry each §14/§15
item's ``custom_id``; ``results --format openai|anthropic`` writes another API's result lines
(``relay.cli.batch_results``).

``status`` prints a derived state a person can read at a glance — ``waiting`` (nothing started yet),
``running``, ``finished`` or ``cancelled`` — with the item counts by state, because the API's ``Status``
stays ``queued`` until a cancel and would make a finished batch look unstarted. ``results`` streams the
JSONL results (``--failed``: only the discarded items), ``cancel`` cancels, ``retry ID [--errors PREFIX …]
[--state S …] [--wait]`` makes a new batch of a finished batch's failed items (SPEC §17) and prints its id.

Why it polls with ``?items=false``: the default status view lists every item (≈ 35 bytes each, 1.7 MB at
50 000 items); the bar needs only the counts.

The files' formats and their checks are ``relay.cli.batch_files``'; the HTTP client is
``relay.cli.inference``'s.

Exit codes: 0 success (with ``--wait``: every item completed), 2 finished with discarded or cancelled
items, 1 error (bad input, HTTP error, unreachable Relay), 130 when ``--wait`` is interrupted (the batch
goes on). Reads ``RELAY_URL`` and ``RELAY_API_KEY``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from relay.cli.batch_files import message_batch_format, openai_format, read_batch_file, with_lines
from relay.cli.batch_results import MESSAGE_BATCHES_PATH, POLL_S, anthropic_results, openai_results
from relay.cli.inference import error_message, inference_call, inference_client, json_or_none
from relay.cli.support import admin_call, fail
from relay.domain.openai_batches import ENDPOINT_SHAPES

batch_app = typer.Typer(
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Batches (submit, status, results, cancel), over the inference plane (RELAY_URL, RELAY_API_KEY).",
)
err = Console(stderr=True)
SHAPES = ("openai", "anthropic", "openai_responses")
FINAL = ("completed", "discarded", "cancelled")


def derived_state(view: dict[str, Any]) -> str:
    """``waiting`` | ``running`` | ``finished`` | ``cancelled`` from a status view (with or without items)."""
    if view["Status"] == "cancelled":
        return "cancelled"
    if view["CompletedAt"] is not None:
        return "finished"
    return "waiting" if set(view["counts"]) <= {"available"} else "running"


def counts_text(counts: dict[str, int]) -> str:
    return ", ".join(f"{state} {n}" for state, n in counts.items()) or "no items"


def summary(view: dict[str, Any]) -> str:
    """One line: how the batch ended, and where its failures are."""
    counts = view["counts"]
    parts = [f"{counts.get('completed', 0)} completed"]
    if counts.get("discarded"):
        parts.append(f"{counts['discarded']} failed")
    if counts.get("cancelled"):
        parts.append(f"{counts['cancelled']} cancelled")
    for state in ("available", "running"):
        if counts.get(state):
            parts.append(f"{counts[state]} {state}")
    line = f"{view['ID']} {derived_state(view)}: {', '.join(parts)}"
    if counts.get("discarded"):
        line += f"; see the failures with: relay batch results {view['ID']} --failed"
    return line


def exit_code(counts: dict[str, int]) -> int:
    return 0 if set(counts) <= {"completed"} else 2


def _submit_openai(http: httpx.Client, file: Path, endpoint: str) -> tuple[str, int]:
    """Upload the file and create its batch through the OpenAI-compatible API; ``(batch id, total)``."""
    try:
        with file.open("rb") as handle:
            uploaded = http.post(
                "/openai/v1/files",
                data={"purpose": "batch"},
                files={"file": (file.name, handle, "application/jsonl")},
            )
        if uploaded.status_code >= 400:
            fail(
                f"{file}: upload: {uploaded.status_code}: "
                f"{error_message(json_or_none(uploaded)) or uploaded.text}"
            )
        body = {"input_file_id": uploaded.json()["id"], "endpoint": endpoint, "completion_window": "24h"}
        created = http.post("/openai/v1/batches", json=body)
    except httpx.HTTPError as exc:
        fail(f"cannot reach Relay at {http.base_url} (RELAY_URL): {exc}")
    if created.status_code >= 400:
        fail(f"{file}: {created.status_code}: {error_message(json_or_none(created)) or created.text}")
    batch_id = str(created.json()["id"])
    view = inference_call(http, "GET", f"/v1/batches/{batch_id}", params={"items": "false"})
    return batch_id, int(view["TotalItems"])


@batch_app.command("submit")
def batch_submit(
    file: Path = typer.Argument(..., help="JSONL (request bodies, or OpenAI batch lines) or a JSON array"),
    shape: str | None = typer.Option(
        None,
        "--shape",
        help="openai | anthropic | openai_responses (plain bodies; OpenAI lines name their url)",
    ),
    wait: bool = typer.Option(False, "--wait", help="Show progress on stderr until every item is final"),
) -> None:
    """Submit a batch; prints only its id on stdout."""
    endpoint = openai_format(file)
    if endpoint is not None:
        if shape is not None and shape != ENDPOINT_SHAPES[endpoint]:
            fail(f"--shape {shape} does not match the file's url {endpoint}")
        with inference_client() as http:
            batch_id, total = _submit_openai(http, file, endpoint)
            print(batch_id, flush=True)
            if wait:
                raise typer.Exit(exit_code(_wait(http, batch_id, total)["counts"]))
        return
    if shape is not None and shape not in SHAPES:
        fail(f"unknown shape {shape!r}: use one of {', '.join(SHAPES)}")
    requests, lines = read_batch_file(file)
    payload: dict[str, Any]
    if shape in (None, "anthropic") and message_batch_format(file, requests):
        path, payload = MESSAGE_BATCHES_PATH, {"requests": requests}  # SPEC §15: keeps the custom_ids
    elif shape is None:
        fail("--shape is required for a file of request bodies (openai | anthropic | openai_responses)")
    else:
        path, payload = "/v1/batches", {"shape": shape, "requests": requests}
    with inference_client() as http:
        try:
            response = http.post(path, json=payload)
        except httpx.HTTPError as exc:
            fail(f"cannot reach Relay at {http.base_url} (RELAY_URL): {exc}")
        if response.status_code >= 400:
            try:
                message = error_message(response.json()) or response.text
            except ValueError:
                message = response.text
            fail(f"{file}: {response.status_code}: {with_lines(message, lines)}")
        created = response.json()
        batch_id = created["id"]
        print(batch_id, flush=True)
        if wait:
            view = _wait(http, batch_id, created.get("total_items", len(requests)))
            raise typer.Exit(exit_code(view["counts"]))


def _bar_counts(counts: dict[str, int]) -> str:
    return (
        f"done {counts.get('completed', 0)} · failed {counts.get('discarded', 0)}"
        f" · cancelled {counts.get('cancelled', 0)}"
    )


def _wait(http: httpx.Client, batch_id: str, total: int) -> dict[str, Any]:
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[counts]}"),
        TimeElapsedColumn(),
        console=err,
    )
    try:
        with progress:
            task = progress.add_task(batch_id, total=total, counts=_bar_counts({}))
            while True:
                view = inference_call(http, "GET", f"/v1/batches/{batch_id}", params={"items": "false"})
                state = derived_state(view)
                if state == "cancelled" and view["CompletedAt"] is None:
                    state = "cancelling"  # items running on another replica finish first
                final = sum(n for s, n in view["counts"].items() if s in FINAL)
                progress.update(
                    task,
                    completed=final,
                    description=f"{batch_id} {state}",
                    counts=_bar_counts(view["counts"]),
                )
                if view["CompletedAt"] is not None:
                    break
                time.sleep(POLL_S)
    except KeyboardInterrupt:
        print(
            f"stopped waiting; {batch_id} goes on (relay batch status {batch_id}, "
            f"relay batch cancel {batch_id})",
            file=sys.stderr,
        )
        raise typer.Exit(130) from None
    print(summary(view), file=sys.stderr, flush=True)
    return dict(view)


@batch_app.command("status")
def batch_status(batch_id: str = typer.Argument(..., help="The batch id (b_…)")) -> None:
    """A batch's state (waiting, running, finished, cancelled) and its items by state."""
    with inference_client() as http:
        view = inference_call(http, "GET", f"/v1/batches/{batch_id}", params={"items": "false"})
    state = derived_state(view)
    print(f"batch     {view['ID']}")
    print(f"state     {state}")
    print(f"items     {view['TotalItems']} ({counts_text(view['counts'])})")
    print(f"created   {view['CreatedAt']}")
    print(f"{'finished' if state != 'cancelled' else 'ended':<9} {view['CompletedAt'] or '-'}")
    if view["counts"].get("discarded"):
        failed = view["counts"]["discarded"]
        print(f"{failed} failed: see them with: relay batch results {view['ID']} --failed")


@batch_app.command("list")
def batch_list(
    limit: int = typer.Option(20, "--limit", help="Batches per page, 1-100"),
    after: str | None = typer.Option(None, "--after", help="List the batches older than this one"),
    every: bool = typer.Option(
        False, "--all", help="Every owner's batches, over the control API (RELAY_ADMIN_TOKEN)"
    ),
) -> None:
    """Your batches of every API, newest first: id, state, items, created (--all: every owner's)."""
    if every:
        _list_every_owner(limit, after)
        return
    params: dict[str, Any] = {"limit": limit}
    if after is not None:
        params["after"] = after
    with inference_client() as http:
        page = inference_call(http, "GET", "/v1/batches", params=params)
    for view in page["batches"]:
        state = derived_state(view)
        items = f"{view['TotalItems']:>6} items"
        print(f"{view['ID']}  {state:<9}  {items}  {view['CreatedAt']}  {counts_text(view['counts'])}")
    if page["next_cursor"]:
        print(f"more: relay batch list --after {page['next_cursor']}", file=sys.stderr)


def _list_every_owner(limit: int, cursor: str | None) -> None:
    """The admin's view (SPEC §11 ``GET /api/batches``): one page, with the owner and the API."""
    params: dict[str, Any] = {"limit": limit, **({"cursor": cursor} if cursor else {})}
    page = admin_call("GET", "/api/batches", params=params)
    for batch in page["items"]:
        items = f"{batch['total_items']:>6} items"
        print(
            f"{batch['id']}  {batch['api']:<9}  {batch['state']:<9}  {items}  {batch['created_at']}"
            f"  {batch['owner']}  {counts_text(batch['counts'])}"
        )
    if page["next_cursor"]:
        print(f"more: relay batch list --all --after {page['next_cursor']}", file=sys.stderr)


@batch_app.command("results")
def batch_results(
    batch_id: str = typer.Argument(..., help="The batch id (b_… or batch_…)"),
    output: Path | None = typer.Option(None, "-o", "--output", help="Write to this file, not stdout"),
    failed: bool = typer.Option(False, "--failed", help="Only the failed (discarded) items, with why"),
    fmt: str = typer.Option(
        "relay",
        "--format",
        help="relay (result objects) | openai (OpenAI output/error lines) | anthropic (Message Batch lines)",
    ),
) -> None:
    """A batch's results as JSONL, one result object per line."""
    if fmt not in ("relay", "openai", "anthropic"):
        fail(f"unknown format {fmt!r}: use relay, openai or anthropic")
    if fmt in ("openai", "anthropic"):
        convert = openai_results if fmt == "openai" else anthropic_results
        with inference_client() as http:
            sink = output.open("wb") if output is not None else sys.stdout.buffer
            try:
                convert(http, batch_id, sink)
            except httpx.HTTPError as exc:
                fail(f"cannot read the results from {http.base_url}: {exc}")
            finally:
                if output is not None:
                    sink.close()
                else:
                    sink.flush()
        return
    with inference_client() as http:
        inference_call(
            http, "GET", f"/v1/batches/{batch_id}", params={"items": "false"}
        )  # a clear error first
        try:
            with http.stream(
                "GET", f"/v1/batches/{batch_id}/results", params={"format": "jsonl"}
            ) as response:
                if response.status_code >= 400:
                    response.read()
                    fail(f"{response.status_code}: {response.text}")
                sink = output.open("wb") if output is not None else sys.stdout.buffer
                try:
                    if failed:
                        for line in response.iter_lines():
                            if line and json.loads(line).get("state") == "discarded":
                                sink.write(line.encode() + b"\n")
                    else:
                        for chunk in response.iter_bytes():
                            sink.write(chunk)
                finally:
                    if output is not None:
                        sink.close()
                    else:
                        sink.flush()
        except httpx.HTTPError as exc:
            fail(f"cannot read the results from {http.base_url}: {exc}")


@batch_app.command("cancel")
def batch_cancel(batch_id: str = typer.Argument(..., help="The batch id (b_…)")) -> None:
    """Cancel a batch (idempotent): waiting items are cancelled at once, running ones stopped."""
    with inference_client() as http:
        inference_call(http, "POST", f"/v1/batches/{batch_id}/cancel")
    print(f"cancelled {batch_id}")


@batch_app.command("retry")
def batch_retry(
    batch_id: str = typer.Argument(..., help="The finished batch whose failed items to retry (any API's id)"),
    errors: list[str] = typer.Option(
        [], "--errors", help="Retry only items whose error starts with this prefix (repeatable)"
    ),
    states: list[str] = typer.Option([], "--state", help="discarded | cancelled (repeatable; default both)"),
    wait: bool = typer.Option(False, "--wait", help="Show progress on stderr until every item is final"),
) -> None:
    """Retry a finished batch's failed items as a new batch; prints only the new id."""
    body: dict[str, Any] = {}
    if states:
        body["states"] = states
    if errors:
        body["errors"] = errors
    with inference_client() as http:
        created = inference_call(http, "POST", f"/v1/batches/{batch_id}/retry", json=body)
        print(created["id"], flush=True)
        if wait:
            raise typer.Exit(exit_code(_wait(http, created["id"], created["total_items"])["counts"]))
