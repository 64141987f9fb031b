"""Wire shapes as pure functions (SPEC §7, §7.2, §8): everything the inference plane and the batch runner
need to know about the bodies, headers and streams they relay.

What it knows: how to build the upstream request of a same-shape call (``build_upstream_request``), read
token usage from responses and streams (``usage_from_response``, ``StreamTap``), validate a request
body's envelope (``parse_request``, ``wants_stream``), translate Relay's canonical shape
(``canonical_to``, ``canonical_from_response``, ``CanonicalStream``), translate between the provider
shapes through one internal representation (``translate_request``, ``translate_response``,
``TranslatingStream``, ``translate_error``; SPEC §7.3), and which shape may go to which adapter
(``admit``, the one admission rule of both planes).

What it deliberately does not know: sockets, HTTP clients, hosts, keys, the catalog, the database —
nothing in this package does I/O or imports a module that does (enforced by import-linter).

Invariants: functions are pure and never mutate their inputs; stream filters are the only stateful
objects, one per stream, fed in order; malformed upstream data degrades to zero usage or a pass-through
chunk, never an exception on the response path.

Module map: ``base`` (names, paths, ``Usage``, errors), ``inbound``, ``request``, ``usage``, ``stream``,
``canonical``, ``canonical_stream``, ``admission``, ``translate`` (the hub) over ``ir`` and
the per-shape halves ``chat_ir``/``chat_sse``, ``anthropic_ir``/``anthropic_sse``,
``responses_ir``/``responses_sse``, with ``params`` (hints and refusals); per-shape metering knowledge in
``openai``, ``responses``, ``anthropic``; plumbing in ``sse`` and ``json_codec``.
"""

from .admission import Admission, Dispatch, admit, can_dispatch
from .base import (
    ADAPTERS,
    ANTHROPIC,
    CANONICAL,
    EMBEDDINGS,
    INBOUND_SHAPES,
    OPENAI,
    OPENAI_RESPONSES,
    UPSTREAM_PATHS,
    AdapterError,
    UpstreamRequest,
    Usage,
)
from .canonical import DEFAULT_ANTHROPIC_MAX_TOKENS, canonical_from_response, canonical_to, parse_canonical
from .canonical_stream import CanonicalStream
from .inbound import parse_request, wants_stream
from .request import build_upstream_request
from .stream import StreamTap
from .translate import TranslatingStream, translate_error, translate_request, translate_response
from .usage import usage_from_response

__all__ = [
    "ADAPTERS",
    "ANTHROPIC",
    "CANONICAL",
    "DEFAULT_ANTHROPIC_MAX_TOKENS",
    "EMBEDDINGS",
    "INBOUND_SHAPES",
    "OPENAI",
    "OPENAI_RESPONSES",
    "UPSTREAM_PATHS",
    "AdapterError",
    "Admission",
    "CanonicalStream",
    "Dispatch",
    "StreamTap",
    "TranslatingStream",
    "UpstreamRequest",
    "Usage",
    "admit",
    "build_upstream_request",
    "can_dispatch",
    "canonical_from_response",
    "canonical_to",
    "parse_canonical",
    "parse_request",
    "translate_error",
    "translate_request",
    "translate_response",
    "usage_from_response",
    "wants_stream",
]
