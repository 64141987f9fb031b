"""``relay batch results --format openai|anthropic``: a batch's results as another API's result lines.

Why in the client: the §14 and §15 APIs serve their own result files for their own batches; a batch of
another API (a §10 batch, a retry) has only §10.3 result objects, converted here line by line as they
stream, so nothing is held in memory.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx

from relay.cli.inference import error_message, inference_call, json_or_none
from relay.cli.support import fail
from relay.domain.openai_batches import error_line

POLL_S = 0.5
#: How long `results --format openai` waits for a §14 batch's output files (FINALIZING_POLLS × POLL_S).
FINALIZING_POLLS = 120
MESSAGE_BATCHES_PATH = "/anthropic/v1/messages/batches"


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
                sink.write(error_line(line_id, result.get("custom_id"), result["error"], None, "") + b"\n")


def anthropic_results(http: httpx.Client, batch_id: str, sink: Any) -> None:
    """Anthropic Message Batches result lines: a §15 batch's own results (once it has ended); any
    other batch's results converted (``custom_id`` as it was given, else the item's idx as text)."""
    if batch_id.startswith("msgbatch_"):
        path = f"{MESSAGE_BATCHES_PATH}/{batch_id}/results"
        with http.stream("GET", path) as response:
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
            if text:
                sink.write(json.dumps(anthropic_line(json.loads(text))).encode() + b"\n")


def anthropic_line(result: dict[str, Any]) -> dict[str, Any]:
    """One §10.3 result object as an Anthropic Message Batches result line."""
    custom_id = result.get("custom_id") or str(result["idx"])
    if result["state"] == "completed":
        return {"custom_id": custom_id, "result": {"type": "succeeded", "message": result.get("response")}}
    if result["state"] == "cancelled":
        return {"custom_id": custom_id, "result": {"type": "canceled"}}
    error = {"type": "error", "error": {"type": "api_error", "message": result.get("error") or ""}}
    return {"custom_id": custom_id, "result": {"type": "errored", "error": error}}
