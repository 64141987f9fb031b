"""No import circle between the modules of ``relay`` (ARCHITECTURE rule 3: layers only point down).

The layers contract of import-linter checks the top-level packages; this checks every module: an
import circle inside a package (two modules each needing the other) means neither can be read, tested
or moved alone. Imports under ``if TYPE_CHECKING:`` are left out: they name a type for the checker and
never run, so they cannot make an import order matter.

Why a test and not an import-linter contract: ``acyclic_siblings`` (import-linter 2.17) would count
the TYPE_CHECKING imports too, unless the whole configuration excluded them, which would loosen every
other contract.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import grimp
import pytest


def import_cycles(edges: Mapping[str, Sequence[str]]) -> list[list[str]]:
    """Every strongly connected set of more than one module (Tarjan's algorithm, iterative: the
    graph is deep enough to hit Python's recursion limit on a recursive walk), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(edges.get(root, ())))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges.get(child, ()))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return cycles


def runtime_imports(graph: grimp.ImportGraph, root: str) -> dict[str, list[str]]:
    return {
        module: sorted(m for m in graph.find_modules_directly_imported_by(module) if m.startswith(root + "."))
        for module in graph.modules
        if module == root or module.startswith(root + ".")
    }


def test_relay_has_no_import_cycle() -> None:
    graph = grimp.build_graph("relay", cache_dir=None, exclude_type_checking_imports=True)
    assert import_cycles(runtime_imports(graph, "relay")) == []


@pytest.mark.parametrize(
    ("edges", "expected"),
    [
        ({"a": ["b"], "b": ["a"]}, [["a", "b"]]),
        ({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}, [["a", "b", "c"]]),
        ({"a": ["b"], "b": ["c"], "c": []}, []),
    ],
)
def test_a_cycle_is_found(edges: dict[str, list[str]], expected: list[list[str]]) -> None:
    assert import_cycles(edges) == expected


def test_a_cycle_in_a_real_graph_is_found() -> None:
    graph = grimp.ImportGraph()
    for module in ("pkg", "pkg.a", "pkg.b", "pkg.c"):
        graph.add_module(module)
    graph.add_import(importer="pkg.a", imported="pkg.b")
    graph.add_import(importer="pkg.b", imported="pkg.a")
    graph.add_import(importer="pkg.c", imported="pkg.a")
    assert import_cycles(runtime_imports(graph, "pkg")) == [["pkg.a", "pkg.b"]]
