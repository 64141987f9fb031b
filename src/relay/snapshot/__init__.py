"""The catalog as the hot path sees it: one immutable :class:`Snapshot` of every catalog object.

What it does. ``entities`` holds the catalog objects (each made from its row by ``from_row``), ``build``
the :class:`Snapshot` and ``build_snapshot`` (rows → snapshot, pure), ``reloader`` the
:class:`~relay.snapshot.reloader.CatalogReloader` that reads the rows and swaps snapshots. This module
re-exports the values and the builder, so ``from relay.snapshot import Policy, Snapshot`` is the import
of the pure core.

What it deliberately does not know. The reloader is not imported here: importing the snapshot's values
imports no database code (``relay.snapshot.reloader`` is imported by the composition root and the
control plane only).

Invariants. Named ``snapshot`` (not ``catalog``) to tell it apart from the catalog's storage
(``store.catalog``), its write specs (``domain.kind_specs``) and its control-plane service
(``control.services.catalog``).
"""

from relay.snapshot.build import Snapshot, build_snapshot
from relay.snapshot.entities import (
    Binding,
    Host,
    HostKey,
    Model,
    Policy,
    Project,
    RelayKey,
    ServiceAccount,
    Team,
    User,
)

__all__ = [
    "Binding",
    "Host",
    "HostKey",
    "Model",
    "Policy",
    "Project",
    "RelayKey",
    "ServiceAccount",
    "Snapshot",
    "Team",
    "User",
    "build_snapshot",
]
