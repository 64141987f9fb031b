"""``relay batch results --format openai|anthropic``: a batch's results as another API's result lines.

Why in the client: the §14 and §15 APIs serve their own result files for their own batches; a batch of
another API (a §10 batch, a retry) has only §10.3 result objects, converted here line by line as they
stream, so nothing is held in memory.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

import httpx

from relay.cli.inference import error_message, inference_call, json_or_none
from relay.cli.support import fail
from relay.domain.batch_record import ResultRow
from relay.domain.message_batches import result_line
from relay.domain.openai_batches import error_line

POLL_S = 0.5
#: How long `results --format openai` waits for a §14 batch's output files (FINALIZING_POLLS × POLL_S).
FINALIZING_POLLS = 120
MESSAGE_BATCHES_PATH = "/anthropic/v1/messages/batches"
FINAL = ("completed", "discarded", "cancelled")
UPSTREAM_STATUS = re.compile(r"^upstream returned (\d{3})")


def openai_results(http: httpx.Client, batch_id: str, sink: Any) -> None:
    """OpenAI-format lines: a §14 batch's output then error file; a §10 batch's results converted."""
    if batch_id.startswith("batch_"):
        batch = inference_call(http, "GET", f"/openai/v1/batches/{batch_id}")
        # Every item is final once `--wait` returns, but the output and error files are written just
        # after (status `finalizing`): read them once they exist, not an empty list before.
        for _ in range(FINALIZING_POLLS):
            if batch["status"] != "finalizing":
                break
            time.sleep(POLL_S)
            batch = inference_call(http, "GET", f"/openai/v1/batches/{batch_id}")
        else:
            fail(f"{batch_id} is still finalizing: try again shortly")
        for file_id in (batch["output_file_id"], batch["error_file_id"]):
            if file_id is not None:
                with http.stream("GET", f"/openai/v1/files/{file_id}/content") as response:
                    if response.status_code >= 400:
                        response.read()
                        fail(f"{response.status_code}: {response.text}")
                    for chunk in response.iter_bytes():
                        sink.write(chunk)
        return
    with http.stream("GET", f"/v1/batches/{batch_id}/results", params={"format": "jsonl"}) as response:
        if response.status_code >= 400:
            response.read()
            fail(f"{response.status_code}: {response.text}")
        for text in response.iter_lines():
            if not text:
                continue
            result = json.loads(text)
            line_id = f"{batch_id}-{result['idx']}"
            if result["state"] == "completed":
                answer = {"status_code": 200, "request_id": None, "body": result.get("response")}
                custom_id = result.get("custom_id")
                line: Any = {"id": line_id, "custom_id": custom_id, "response": answer, "error": None}
                sink.write(json.dumps(line).encode() + b"\n")
            elif "error" in result:
                error = result["error"]
                sink.write(
                    error_line(line_id, result.get("custom_id"), error, upstream_status(error), "") + b"\n"
                )


def anthropic_results(http: httpx.Client, batch_id: str, sink: Any) -> None:
    """Anthropic Message Batches result lines: a §15 batch's own results (once it has ended); any other
    batch's final items converted by the §15 API's own renderer (``custom_id`` the item's own, else
    ``<batch id>-<idx>``)."""
    if batch_id.startswith("msgbatch_"):
        with http.stream("GET", f"{MESSAGE_BATCHES_PATH}/{batch_id}/results") as response:
            if response.status_code >= 400:
                response.read()
                fail(f"{response.status_code}: {error_message(json_or_none(response)) or response.text}")
            for chunk in response.iter_bytes():
                sink.write(chunk)
        return
    with http.stream("GET", f"/v1/batches/{batch_id}/results", params={"format": "jsonl"}) as response:
        if response.status_code >= 400:
            response.read()
            fail(f"{response.status_code}: {response.text}")
        for text in response.iter_lines():
            if not text:
                continue
            result = json.loads(text)
            if result["state"] not in FINAL:
                continue  # Anthropic's results list final requests only
            error = result.get("error")
            row = ResultRow(
                result["idx"],
                result["state"],
                error,
                None,
                result.get("custom_id") or f"{batch_id}-{result['idx']}",
                upstream_status(error),
            )
            body = json.dumps(result["response"]).encode() if "response" in result else None
            sink.write(result_line(row, body))


def upstream_status(error: str | None) -> int | None:
    """The upstream's HTTP status named by a §10.4 ``upstream returned <status>`` error, else None."""
    status = UPSTREAM_STATUS.match(error or "")
    return int(status.group(1)) if status else None
