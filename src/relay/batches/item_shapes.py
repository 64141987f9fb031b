"""A batch item's wire shapes (SPEC §10.4, §17 ``translate``): what is sent upstream for an item, its
answer in the item's own shape, and §10.4's ``upstream returned`` text.

Why a module of its own. The runner (``relay.batches.runner``) decides when and whether an item runs;
these pure functions decide what it looks like on the wire, by the one admission rule
(``relay.adapters.admit``) live requests use. No I/O.
"""

from __future__ import annotations

from relay.adapters import EMBEDDINGS, Dispatch, admit, translate_request, translate_response
from relay.adapters.translate import provider_error_message
from relay.domain.batches import OPENAI_EMBEDDINGS
from relay.errors import InvalidRequest, RelayError
from relay.request.auth import Principal
from relay.request.pipeline import Outcome
from relay.request.routing import Plan


def wire_request(inbound: str, plan: Plan, body: dict, translate: bool, max_tokens: int) -> tuple[str, dict]:
    """The shape and body sent upstream, by the one admission rule: as it is, or — under a policy with
    ``batch.translate`` (SPEC §17) — translated as a live request is (§7.3); otherwise a cross-shape
    item fails (§10.4; its one exception sends a Responses item as it is to host ``openai``'s Chat
    Completions path). The item's shape is all it looks at, never the API that submitted the batch."""
    adapter = plan.binding.adapter
    # An ``openai_embeddings`` item is a live ``/v1/embeddings`` request (an ``openai`` binding only).
    as_live = EMBEDDINGS if inbound == OPENAI_EMBEDDINGS else inbound
    admission = admit(as_live, adapter, host=plan.host.name, batch=True, translate=translate)
    refused = f"cross-shape dispatch: item shape {inbound}, binding adapter {adapter}"
    if admission.dispatch is Dispatch.PASS_THROUGH:
        return admission.wire_shape, body
    if admission.dispatch is Dispatch.TRANSLATE:
        try:
            translated, _ = translate_request(inbound, adapter, body, default_max_tokens=max_tokens)
        except RelayError as exc:  # a parameter the adapter has no counterpart for (§7.3)
            raise InvalidRequest(f"{refused}: {exc.message}", code=exc.code) from None
        return admission.wire_shape, translated
    raise InvalidRequest(refused, code="cross_shape")


def in_item_shape(
    inbound: str, principal: Principal, plan: Plan | None, outcome: Outcome, model: str
) -> bytes | None:
    """A completed item's response in the item's own shape (SPEC §17 ``translate``: as §7.3 gives a
    live caller, ``model`` the one asked for or, after a fallback, the one that answered); None when a
    translated answer cannot be read."""
    body = outcome.body or b""
    if plan is None or not principal.policy.batch.translate:
        return body
    adapter = plan.binding.adapter
    if (
        admit(inbound, adapter, host=plan.host.name, batch=True, translate=True).dispatch
        is not Dispatch.TRANSLATE
    ):
        return body
    answered = plan.model.name if outcome.fallback_from is not None else model
    try:
        return translate_response(adapter, inbound, body, model=answered)
    except ValueError:
        return None


def upstream_returned(status: int, body: bytes | None) -> str:
    """§10.4's ``upstream returned <status>``, followed by the provider's error message when its body
    has one (``upstream returned 400: Invalid 'messages[0].role' …``): the status alone does not tell a
    user what to fix. Only that message is kept, bounded; the body itself never is (SPEC §10.3)."""
    provider = provider_error_message(body)
    return f"upstream returned {status}" + (f": {provider}" if provider else "")
