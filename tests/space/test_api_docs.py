"""docs/space-api.md lists exactly the routes that `/v1/openapi.json` describes."""

from __future__ import annotations

import re
from pathlib import Path

from space_support import Api

from space.appstate import ROUTE_DOCS

DOC = Path(__file__).resolve().parents[2] / "docs" / "space-api.md"
ROW = re.compile(r"^\| `(GET|POST|PUT|PATCH|DELETE) (/v1/[^` ]*)` \|", re.MULTILINE)


async def test_documented_routes_equal_openapi(api: Api) -> None:
    status, doc = await api.get("/openapi.json")
    assert status == 200 and doc["openapi"].startswith("3.")
    served = {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops}
    documented = set(ROW.findall(DOC.read_text()))
    assert documented == served


async def test_openapi_describes_bodies(api: Api) -> None:
    _, doc = await api.get("/openapi.json")
    create = doc["paths"]["/v1/spaces/{space}/fires"]["post"]
    schema = create["requestBody"]["content"]["application/json"]["schema"]
    assert "anyOf" in schema or "$ref" in schema
    assert "FireIn" in doc["components"]["schemas"]
    assert doc["components"]["schemas"]["FireIn"]["required"] == [
        "triggerId",
        "key",
        "term",
        "peer",
    ]


async def test_every_v1_route_is_in_the_catalogue(api: Api) -> None:
    app = api.client.app
    assert app is not None
    routed = {
        (route.method, route.resource.canonical)
        for route in app.router.routes()
        if route.resource is not None
        and route.resource.canonical.startswith("/v1/")
        and route.method != "HEAD"
    }
    assert routed == {(doc.method, doc.path) for doc in app[ROUTE_DOCS]}
