"""Reading catalog YAML for ``relay apply`` (SPEC §11) within bounds: a file is data, never a bomb.

PyYAML's safe loader builds no objects of arbitrary classes, but it still honours anchors and aliases,
so a 572-byte file whose aliases nest nine deep ("billion laughs") is a graph of a billion nodes once
serialised to JSON for ``POST /api/apply``: 4 GB and a crash. Here a file is refused, in one line, when
it is larger than ``MAX_BYTES``, uses more than ``MAX_ALIASES`` aliases, expands to more than
``MAX_NODES`` nodes, or refers to itself (a recursive alias).

What it deliberately does not know: catalog kinds or fields (the control plane validates those).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, SequenceNode

MAX_BYTES = 16 * 1024 * 1024
MAX_ALIASES = 1000
MAX_NODES = 1_000_000


class DocumentsRefused(ValueError):
    """The file cannot be read within the bounds; the message is one line."""


class _BoundedLoader(yaml.SafeLoader):
    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.aliases = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if self.check_event(yaml.AliasEvent):
            self.aliases += 1
            if self.aliases > MAX_ALIASES:
                raise DocumentsRefused(f"more than {MAX_ALIASES} YAML aliases")
        return super().compose_node(parent, index)  # type: ignore[no-any-return]

    def construct_document(self, node: Node) -> Any:
        _expanded_size(node)
        return super().construct_document(node)


def _expanded_size(root: Node) -> int:
    """Nodes the document has once every alias is expanded; raises past ``MAX_NODES`` or on a cycle."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_nodes:
            raise DocumentsRefused("a YAML alias refers to its own ancestor (recursive document)")
        open_nodes.add(key)
        total = 1
        if isinstance(node, SequenceNode):
            children = list(node.value)
        elif isinstance(node, MappingNode):
            children = [part for pair in node.value for part in pair]
        else:
            children = []
        for child in children:
            total += size(child)
            if total > MAX_NODES:
                raise DocumentsRefused(f"the YAML expands to more than {MAX_NODES} nodes (aliases)")
        open_nodes.discard(key)
        sizes[key] = total
        return total

    return size(root)


def yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's error as one line with the place it points at (1-based line and column, as editors
    count): ``line 3, column 27: expected ',' or ']', but got '}' (while parsing a flow sequence
    started at line 3, column 22)``. PyYAML's own text spreads this over five lines, and its first
    line alone (the context) says neither where nor what."""
    if not isinstance(exc, yaml.MarkedYAMLError):
        return (str(exc).splitlines() or [type(exc).__name__])[0]
    problem = exc.problem or exc.context or "invalid YAML"
    mark = exc.problem_mark or exc.context_mark
    text = f"{_place(mark)}: {problem}" if mark is not None else problem
    if exc.context and exc.problem:
        started = exc.context_mark
        same = (
            started is not None
            and mark is not None
            and (started.line, started.column)
            == (
                mark.line,
                mark.column,
            )
        )
        where = f" started at {_place(started)}" if started is not None and not same else ""
        text += f" ({exc.context}{where})"
    return text


def _place(mark: yaml.Mark) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}"


def load_documents(path: Path) -> list[Any]:
    """The non-empty YAML documents of ``path``; a list document contributes its items."""
    return load_documents_with_lines(path)[0]


def load_documents_with_lines(path: Path) -> tuple[list[Any], list[int]]:
    """:func:`load_documents` and, for each document, the 1-based line it starts on, so an error the
    control plane reports against ``documents[i]`` can be pointed at in the file."""
    if path.stat().st_size > MAX_BYTES:
        raise DocumentsRefused(f"larger than {MAX_BYTES} bytes")
    loader = _BoundedLoader(path.read_text())
    docs: list[Any] = []
    lines: list[int] = []
    try:
        while loader.check_node():
            node = loader.get_node()
            doc = loader.construct_document(node) if node is not None else None
            if node is None or doc is None:
                continue
            if isinstance(doc, list):
                assert isinstance(node, SequenceNode)
                docs.extend(doc)
                lines.extend(item.start_mark.line + 1 for item in node.value)
            else:
                docs.append(doc)
                lines.append(node.start_mark.line + 1)
    except RecursionError:
        raise DocumentsRefused("the YAML nests too deep") from None
    finally:
        loader.dispose()
    return docs, lines
