"""`GET /v1/openapi.json`: the API described from the routes as registered.

Owns turning the route catalogue (`ROUTE_DOCS`, filled by `http.add_route`)
into an OpenAPI 3.1 document, bodies and answers generated with
`msgspec.json.schema_components`. Every `/v1` route is added with `add_route`,
so the catalogue is the whole API. Must not add behaviour to any route.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec
from aiohttp import web

from space.appstate import ROUTE_DOCS, RouteDoc
from space.auth import roles_for
from space.http import add_route, answer
from triggers import bounds

REF = "#/components/schemas/{name}"
_PARAM = re.compile(r"\{([^}]+)\}")
ERROR_SCHEMA = {
    "type": "object",
    "required": ["error", "detail"],
    "properties": {"error": {"type": "string"}, "detail": {"type": "string"}},
}


_MARKERS = {
    bounds.CronExpr: {"type": "string", "description": "croniter syntax, 5 fields or 6"},
    bounds.TimeZoneName: {"type": "string", "description": "an IANA time zone name"},
    bounds.RefText: {"type": "string", "pattern": f"^({bounds.PROGRAM_REF.pattern})$"},
}


def _schema_hook(typ: type) -> dict[str, Any]:
    """The checked string types of trigger records (`triggers.records`) as plain strings."""
    if typ in _MARKERS:
        return _MARKERS[typ]
    raise NotImplementedError(typ)


def _schemas(docs: list[RouteDoc]) -> tuple[dict[Any, Any], dict[str, Any]]:
    types = list({id(t): t for d in docs for t in (d.body, d.answer) if t is not None}.values())
    schemas, components = msgspec.json.schema_components(
        types, ref_template=REF, schema_hook=_schema_hook
    )
    return {id(t): s for t, s in zip(types, schemas, strict=True)}, components


def _operation(doc: RouteDoc, schemas: dict[Any, Any]) -> dict[str, Any]:
    op: dict[str, Any] = {
        "summary": doc.summary,
        "x-roles": roles_for(doc.method, doc.path),
        "parameters": [
            {"name": p, "in": "path", "required": True, "schema": {"type": "string"}}
            for p in _PARAM.findall(doc.path)
        ],
    }
    if doc.body is not None:
        op["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": schemas[id(doc.body)]}},
        }
    ok: dict[str, Any] = {"description": "success"}
    if doc.answer is not None:
        ok["content"] = {"application/json": {"schema": schemas[id(doc.answer)]}}
    op["responses"] = {
        "2XX": ok,
        "4XX": {
            "description": "refused",
            "content": {"application/json": {"schema": {"$ref": REF.format(name="Error")}}},
        },
    }
    return op


def document(app: web.Application) -> dict[str, Any]:
    docs = app[ROUTE_DOCS]
    schemas, components = _schemas(docs)
    paths: dict[str, dict[str, Any]] = {}
    for doc in docs:
        paths.setdefault(doc.path, {})[doc.method.lower()] = _operation(doc, schemas)
    return {
        "openapi": "3.1.0",
        "info": {"title": "baton space API", "version": "any@v1"},
        "paths": paths,
        "security": [{"bearer": []}],
        "components": {
            "schemas": {**components, "Error": ERROR_SCHEMA},
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


async def get_openapi(request: web.Request) -> web.Response:
    return answer(document(request.app))


def setup(app: web.Application) -> None:
    add_route(
        app,
        "openapi",
        get_openapi,
        "This document",
    )
