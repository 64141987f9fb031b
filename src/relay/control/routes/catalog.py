"""HTTP routes of the catalog (SPEC §2, §11): CRUD for every kind of ``control.kinds`` under
``/api/<plural>``, ``relay apply``/``relay export`` (``/api/apply``, ``/api/export``), ``/api/reload``
and ``/api/snapshot``.

Thin: parse, call :class:`CatalogService` / :class:`ApplyService`, render. Every kind gets the same five
operations from one :class:`KindRoutes`; its create body is the kind's own spec model, so FastAPI
validates it and the OpenAPI document shows it.

What it deliberately does not know: how objects are validated, stored or rendered (the services do).
"""

import inspect
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import Body, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from relay.control.kinds import KINDS, Kind
from relay.control.routes.table import Route
from relay.control.services.apply import ApplyService
from relay.control.services.catalog import CatalogService
from relay.snapshot.reloader import CatalogReloader


class ApplyRequest(BaseModel):
    documents: list[dict[str, Any]]
    dry_run: bool = False
    prune: bool = False


class ApplyPlanStep(BaseModel):
    kind: str
    name: str
    action: str = Field(description="create | update | unchanged | delete")
    changes: dict[str, dict[str, Any]] | None = Field(
        None, description="update only: {field: {from, to}}; write-only values show as ********"
    )
    secret: str | None = Field(
        None, description="a Webhook created without a secret: the generated secret, shown only here"
    )


class ApplyPlan(BaseModel):
    plan: list[ApplyPlanStep]


class KindRoutes:
    """The five operations of one kind."""

    def __init__(self, kind: Kind, catalog: CatalogService) -> None:
        self._kind = kind
        self._catalog = catalog

    async def list_objects(self) -> dict[str, Any]:
        return {"items": await self._catalog.list_all(self._kind)}

    def create_handler(self) -> Callable[[BaseModel], Awaitable[JSONResponse]]:
        """``create_object`` with the kind's spec as its body model (the signature FastAPI reads)."""
        kind, catalog = self._kind, self._catalog

        async def create_object(payload: BaseModel) -> JSONResponse:
            created = await catalog.create(kind, payload.model_dump(exclude_unset=True))
            return JSONResponse(created, status_code=201)

        create_object.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [
                inspect.Parameter(
                    "payload", inspect.Parameter.KEYWORD_ONLY, annotation=Annotated[kind.spec, Body()]
                )
            ]
        )
        return create_object

    async def get_object(self, ref: str) -> dict[str, Any]:
        return await self._catalog.get(self._kind, ref)

    async def patch_object(self, ref: str, payload: Annotated[dict[str, Any], Body()]) -> dict[str, Any]:
        return await self._catalog.patch(self._kind, ref, payload)

    async def delete_object(self, ref: str) -> Response:
        await self._catalog.delete(self._kind, ref)
        return Response(status_code=204)

    def table(self) -> list[Route]:
        name = tag = self._kind.name
        base = f"/api/{self._kind.plural}"
        one = base + "/{ref}"
        return [
            Route("GET", base, self.list_objects, tag, summary=f"List {self._kind.plural}"),
            Route("POST", base, self.create_handler(), tag, status_code=201, summary=f"Create a {name}"),
            Route("GET", one, self.get_object, tag, summary=f"Read a {name}"),
            Route("PATCH", one, self.patch_object, tag, summary=f"Change fields of a {name}"),
            Route(
                "DELETE",
                one,
                self.delete_object,
                tag,
                status_code=204,
                summary=f"Delete a {name} (409 while referenced)",
            ),
        ]


class CatalogRoutes:
    """Apply and export, reload and the snapshot's status."""

    def __init__(self, catalog: CatalogService, applier: ApplyService, reloader: CatalogReloader) -> None:
        self._catalog = catalog
        self._applier = applier
        self._reloader = reloader

    async def apply(self, body: ApplyRequest) -> dict[str, Any]:
        """Apply catalog documents in one transaction (all or nothing); answers the plan."""
        plan = await self._applier.apply(body.documents, dry_run=body.dry_run, prune=body.prune)
        return {"plan": plan}

    async def export(self) -> dict[str, Any]:
        """The catalog as apply documents, without secrets."""
        return {"documents": await self._applier.export()}

    async def reload(self) -> dict[str, Any]:
        """Make every replica rebuild its snapshot: this one before answering, the others within 2 s
        (the revision moves, so even a replica that missed the notice reloads on its next poll)."""
        return {"revision": await self._catalog.force_reload()}

    async def snapshot_status(self) -> dict[str, Any]:
        """Which catalog revision this replica serves, how many objects of each kind it holds, and the
        entries it cannot use as configured (e.g. a host key whose environment variable is unset)."""
        snap = self._reloader.snapshot
        return {
            "revision": snap.revision,
            "loaded_at": snap.loaded_at,
            "counts": snap.counts(),
            "problems": list(snap.problems),
        }

    def table(self) -> list[Route]:
        plan = {"response_model": ApplyPlan, "response_model_exclude_none": True}
        return [
            Route("POST", "/api/apply", self.apply, "apply", options=plan),
            Route("GET", "/api/export", self.export, "apply"),
            Route("POST", "/api/reload", self.reload, "catalog"),
            Route("GET", "/api/snapshot", self.snapshot_status, "catalog"),
        ]


def catalog_routes(catalog: CatalogService, applier: ApplyService, reloader: CatalogReloader) -> list[Route]:
    """Every kind's CRUD (in apply order), then apply/export, reload and the snapshot."""
    kinds = [route for kind in KINDS for route in KindRoutes(kind, catalog).table()]
    return [*kinds, *CatalogRoutes(catalog, applier, reloader).table()]
