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


def load_documents(path: Path) -> list[Any]:
    """The non-empty YAML documents of ``path``; a list document contributes its items."""
    if path.stat().st_size > MAX_BYTES:
        raise DocumentsRefused(f"larger than {MAX_BYTES} bytes")
    loader = _BoundedLoader(path.read_text())
    docs: list[Any] = []
    try:
        while loader.check_data():
            doc = loader.get_data()
            if doc is not None:
                docs.extend(doc if isinstance(doc, list) else [doc])
    except RecursionError:
        raise DocumentsRefused("the YAML nests too deep") from None
    finally:
        loader.dispose()
    return docs
