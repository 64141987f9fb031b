"""A batch submission read item by item from a spooled body (SPEC §10.1, §17 "Scale"): a million-item
``{"shape", "requests": […]}`` never sits in memory whole, neither as bytes nor as a million dicts.

What it does. :class:`StreamedSubmission` walks the body's top-level object with the standard library's
C scanner (``json.JSONDecoder.raw_decode``) over a sliding text window: keys other than ``requests``
are read whole (``shape`` among them); ``requests`` is read one item at a time, and iterating the
submission yields each item's JSON bytes (re-serialised, as a parsed submission's items are), ready
for a payload store's ``write_requests``. It checks what ``relay.domain.batches.validate_submission``
checks, with the same messages: the body is an object, ``shape`` is present and one of the three,
``requests`` is a non-empty list of at most ``max_items`` objects none of which sets ``"stream":
true``, each within ``max_depth`` levels, no lone surrogate, no NaN; any refusal is raised as
``BatchRejected`` from the iteration itself, so the store writing the bodies gives up and keeps
nothing (the service discards what a part-write left).

What it deliberately does not know. Where the bodies go, HTTP, the spool file's life.

Differences from the whole-body parse, all on bodies over the spool threshold: when ``requests``
comes before ``shape``, a bad item is named before a missing or bad ``shape``; a count over the limit
is reported as "more than" the limit (the rest is not read); a key given twice is refused.

Invariants. Memory holds one read block (1 MiB of text) plus the item being parsed; the window drops
what has been consumed. A truncated read is told from a malformed document by where the scanner
stopped: only an error at the end of the window (or an unterminated string) reads more.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterator, Sequence
from typing import IO, Any, Final, Protocol

import orjson

from relay.adapters.json_codec import JsonRefused, depth_exceeds, loads_input
from relay.domain.batches import BATCH_SHAPES, BatchRejected

_BLOCK: Final = 1 << 20  # bytes read from the spool per refill
_WS: Final = re.compile(r"[ \t\n\r]*")
_NEAR_END: Final = 16  # an error this close to the window's end may be a token cut by the window
NOT_AN_OBJECT: Final = "the body must be a JSON object with shape and requests"


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


class ItemStream(Protocol):
    """Items read while they are written (``NewBatch.streamed``): iterated once, in a worker thread
    (the payload stores consume it there), each item's request body as JSON bytes; a refusal is raised
    from the iteration, so the store keeps nothing. ``shape`` and ``custom_ids`` are read after the
    iteration ended without one. :class:`StreamedItems` (a spooled JSON body) is one; the §14 create's
    input file read line by line (``relay.batch_apis.openai_create``) another."""

    def __iter__(self) -> Iterator[bytes]: ...

    @property
    def shape(self) -> str: ...

    @property
    def custom_ids(self) -> Sequence[str | None] | None: ...


class _Window:
    """Decoded text of the spool, read a block at a time; ``pos`` is the parse position in ``text``."""

    def __init__(self, source: IO[bytes], not_json: str) -> None:
        self._source = source
        self._not_json = not_json
        self._decode = codecs.getincrementaldecoder("utf-8")("strict")
        self.text = ""
        self.pos = 0
        self.eof = False

    def more(self, at_least: int = _BLOCK) -> bool:
        """Read at least ``at_least`` more bytes (fewer at the end); False at the end of the body."""
        if self.eof:
            return False
        if self.pos > _BLOCK:  # drop what was consumed: the window stays about one block
            self.text, self.pos = self.text[self.pos :], 0
        data = self._source.read(max(at_least, _BLOCK))
        try:
            self.text += self._decode.decode(data, final=not data)
        except UnicodeDecodeError:
            raise BatchRejected(self._not_json) from None
        if not data:
            self.eof = True
        return True

    def peek(self) -> str:
        """The next character after whitespace ('' at the end), with ``pos`` moved onto it."""
        while True:
            self.pos = _WS.match(self.text, self.pos).end()  # type: ignore[union-attr]
            if self.pos < len(self.text) or not self.more():
                return self.text[self.pos : self.pos + 1]

    def expect(self, char: str, message: str) -> None:
        if self.peek() != char:
            raise BatchRejected(message)
        self.pos += 1


class StreamedItems:
    """A spooled batch create ``{…, "requests": […]}``: iterate it (once) for the items' JSON bytes.
    The walk is shared; what an item, the other keys and the refusals are is each API's
    (:class:`StreamedSubmission` for ``POST /v1/batches``; the §15 create in ``relay.batch_apis``).
    ``shape`` and ``custom_ids`` are known when the iteration has ended without a refusal."""

    not_json: str = NOT_AN_OBJECT  # the refusal of a body that is no JSON object

    def __init__(self, source: IO[bytes], max_items: int, max_depth: int) -> None:
        self._window = _Window(source, self.not_json)
        self._max_items = max_items
        self._max_depth = max_depth  # of one item of ``requests``
        self._decoder = json.JSONDecoder(parse_constant=_refuse_constant)
        self._seen: set[str] = set()
        self._start = 0  # where the last value read began in the window's text
        self.count = 0

    @property
    def shape(self) -> str:
        raise NotImplementedError

    @property
    def custom_ids(self) -> list[str] | None:
        """One per item (§14/§15), else None."""
        return None

    # What each API says -------------------------------------------------------------------------

    def _other_key(self, key: str, value: Any) -> None:
        """A top-level key other than ``requests``, read whole."""

    def _before_items(self) -> None:
        """``requests`` begins (a refusal the other keys read so far already call for)."""

    def _after(self) -> None:
        """The object has ended: refuse what is missing."""

    def _list_refusal(self, problem: str) -> str:
        """The message for ``requests`` that is ``not_a_list``, ``empty`` or ``too_many``."""
        raise NotImplementedError

    def _not_an_item(self, index: int) -> str:
        raise NotImplementedError

    def _item(self, index: int, item: dict[str, Any]) -> bytes:
        """The body to store for ``requests[index]``, or :class:`BatchRejected`."""
        raise NotImplementedError

    # The walk -----------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[bytes]:
        window = self._window
        window.expect("{", self.not_json)
        if window.peek() == "}":
            window.pos += 1
        else:
            while True:
                key = self._value(self.not_json)
                if not isinstance(key, str):
                    raise BatchRejected(self.not_json)
                if key in self._seen:
                    raise BatchRejected(f"{key} appears more than once in the body")
                self._seen.add(key)
                window.expect(":", self.not_json)
                if key == "requests":
                    self._before_items()
                    yield from self._items()
                else:
                    self._other_key(key, self._value(self.not_json))
                if window.peek() == ",":
                    window.pos += 1
                    continue
                window.expect("}", self.not_json)
                break
        if window.peek() != "":
            raise BatchRejected(self.not_json)  # something after the object: not one JSON document
        self._after()

    def _items(self) -> Iterator[bytes]:
        window = self._window
        if window.peek() != "[":
            self._value(self.not_json)  # still one JSON document?
            raise BatchRejected(self._list_refusal("not_a_list"))
        window.pos += 1
        if window.peek() == "]":
            raise BatchRejected(self._list_refusal("empty"))
        while True:
            index = self.count
            if index >= self._max_items:
                raise BatchRejected(self._list_refusal("too_many"))
            if window.peek() != "{":
                self._value(self.not_json)
                raise BatchRejected(self._not_an_item(index))
            item = self._value(self.not_json)
            text, start, end = window.text, self._start, window.pos
            if text.count("{", start, end) + text.count("[", start, end) > self._max_depth and depth_exceeds(
                item, self._max_depth
            ):
                raise BatchRejected(
                    f"requests[{index}]: nests deeper than {self._max_depth} levels (RELAY_MAX_JSON_DEPTH)"
                )
            body = self._item(index, item)
            self.count += 1
            yield body
            following = window.peek()
            window.pos += 1
            if following == "]":
                return
            if following != ",":
                raise BatchRejected(self.not_json)

    def _value(self, message: str) -> Any:
        """The JSON value at the window's position (read further while it is cut by the window)."""
        window = self._window
        window.peek()
        while True:
            try:
                value, end = self._decoder.raw_decode(window.text, window.pos)
            except json.JSONDecodeError as exc:
                cut = exc.pos >= len(window.text) - _NEAR_END or exc.msg.startswith("Unterminated string")
                if cut and window.more(2 * (len(window.text) - window.pos)):
                    continue
                raise BatchRejected(message) from None
            except (ValueError, RecursionError):  # NaN / Infinity, absurd nesting
                raise BatchRejected(message) from None
            # A number at the very end may continue in the next block ("12" | "34"): read on.
            near_end = end >= len(window.text) - _NEAR_END and not window.eof
            if near_end and isinstance(value, int | float) and window.more():
                continue
            self._start, window.pos = window.pos, end
            return value


class StreamedSubmission(StreamedItems):
    """A spooled ``POST /v1/batches`` body (SPEC §10.1): ``{"shape", "requests": [request body, …]}``;
    ``shape`` is known (and valid) when the iteration has ended without a refusal."""

    def __init__(self, source: IO[bytes], max_items: int, max_depth: int) -> None:
        super().__init__(source, max_items, max_depth)
        self._shape: Any = None

    @property
    def shape(self) -> str:
        if self._shape not in BATCH_SHAPES:
            raise RuntimeError("the submission has not been read whole")
        return str(self._shape)

    def _other_key(self, key: str, value: Any) -> None:
        if key == "shape":
            self._shape = value

    def _before_items(self) -> None:
        self._check_shape(before_requests=True)

    def _after(self) -> None:
        self._check_shape(before_requests=False)
        if "requests" not in self._seen:
            raise BatchRejected("requests is required: a non-empty list of request bodies")

    def _check_shape(self, *, before_requests: bool) -> None:
        if "shape" not in self._seen:
            if before_requests:
                return  # it may come after the items
            raise BatchRejected(f"shape is required: one of {', '.join(BATCH_SHAPES)}")
        if self._shape not in BATCH_SHAPES:
            raise BatchRejected(
                f"shape {self._shape!r} cannot be batched: use one of {', '.join(BATCH_SHAPES)} "
                "(canonical and embeddings requests cannot be batched)"
            )

    def _list_refusal(self, problem: str) -> str:
        if problem == "not_a_list":
            return "requests must be a list of request bodies"
        if problem == "empty":
            return "requests must not be empty"
        return (
            f"requests has more than {self._max_items} items; at most {self._max_items} are"
            " allowed (RELAY_BATCH_MAX_ITEMS)"
        )

    def _not_an_item(self, index: int) -> str:
        return f"requests[{index}]: must be a JSON object (a request body)"

    def _item(self, index: int, item: dict[str, Any]) -> bytes:
        if item.get("stream") is True:
            raise BatchRejected(f"requests[{index}]: stream is not allowed (items run unstreamed)")
        return item_bytes(index, item)


def item_bytes(index: int, value: Any) -> bytes:
    """``value`` re-serialised, or :class:`BatchRejected` naming ``requests[index]``."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError as exc:  # a lone surrogate, an integer past 64 bits
        raise BatchRejected(f"requests[{index}]: {exc}") from None


def load_batch_body(raw: bytes, max_depth: int, not_json: str) -> Any:
    """A batch create's body parsed within ``max_depth``, or :class:`BatchRejected`: the parser's
    refusal (too deep, …), or ``not_json`` when it is no JSON at all. Nothing is written before."""
    try:
        return loads_input(raw, max_depth, what="batch body")
    except JsonRefused as exc:
        raise BatchRejected(str(exc)) from None
    except ValueError:
        raise BatchRejected(not_json) from None
