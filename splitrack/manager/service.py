"""The REST API: aiohttp routes over the Manager (openapi.py describes them).

    app = make_app(manager)       # an aiohttp web.Application

    POST   /slices                 {"name", "p", "m", "n"} -> 201 ready | 202 queued
    GET    /slices[?all=true]      {"slices": [SLICEVIEW]}
    GET    /slices/{name}[?wait=S] SLICEVIEW (with wait: once it is no longer queued)
    DELETE /slices/{name}[?force=true]   SLICEVIEW, deleted
    POST   /slices/{name}/jobs     {"argv", "procs", "placement", "hints", "env", "cwd"}
                                   -> 202 JOB
    GET    /jobs                   {"jobs": [JOB]}
    GET    /jobs/{id}[?wait=S]     JOB (with wait: once it has ended)
    GET    /rack                   {"components": [{"id", "kind", "slice"}]}
    GET    /openapi.json           the OpenAPI description

Every answer is JSON. Every error is the HTTP status and {"error": "one line"}:
the manager's refusals (ApiError), a body that is no JSON object or does not fit
its schema, an unknown query parameter (400), no such path (404), a method the
path does not take (405, with Allow), a body over HTTP_BODY_MAX_BYTES (413), a
bug (500, and its traceback on serve's stderr).
"""

import json
import logging
from typing import Any

from aiohttp import web

from splitrack.manager.errors import ApiError
from splitrack.manager.manager import Manager
from splitrack.manager.openapi import DOCUMENT, JOB_REQUEST, SLICE_REQUEST
from splitrack.manager.validate import check
from splitrack.params import HTTP_BODY_MAX_BYTES, WAIT_MAX_S

MANAGER = web.AppKey("manager", Manager)
log = logging.getLogger("splitrack.manager")


def make_app(manager: Manager) -> web.Application:
    app = web.Application(middlewares=[_json_errors], client_max_size=HTTP_BODY_MAX_BYTES)
    app[MANAGER] = manager
    app.add_routes([
        web.post("/slices", create_slice), web.get("/slices", list_slices),
        web.get("/slices/{name}", show_slice), web.delete("/slices/{name}", delete_slice),
        web.post("/slices/{name}/jobs", submit_job),
        web.get("/jobs", list_jobs), web.get("/jobs/{id}", show_job),
        web.get("/rack", show_rack), web.get("/openapi.json", openapi),
    ])
    return app


async def create_slice(request: web.Request) -> web.Response:
    _query(request)
    s = await request.app[MANAGER].create(await _body(request, SLICE_REQUEST))
    return web.json_response(s.view(), status=201 if s.state == "ready" else 202)


async def list_slices(request: web.Request) -> web.Response:
    everything = _query(request, all=_boolean).get("all", False)
    m = request.app[MANAGER]
    shown = [*m.history, *m.slices.values()] if everything else list(m.slices.values())
    return web.json_response({"slices": [s.view() for s in shown]})


async def show_slice(request: web.Request) -> web.Response:
    wait = _query(request, wait=_seconds).get("wait", 0)
    m, name = request.app[MANAGER], request.match_info["name"]
    await m.wait_for(lambda: m.slice(name).state != "queued", wait)
    return web.json_response(m.slice(name).view())


async def delete_slice(request: web.Request) -> web.Response:
    force = _query(request, force=_boolean).get("force", False)
    s = await request.app[MANAGER].delete(request.match_info["name"], force)
    return web.json_response(s.view())


async def submit_job(request: web.Request) -> web.Response:
    _query(request)
    body = await _body(request, JOB_REQUEST)
    job = request.app[MANAGER].submit(request.match_info["name"], body)
    return web.json_response(job.view(), status=202)


async def list_jobs(request: web.Request) -> web.Response:
    _query(request)
    return web.json_response({"jobs": [j.view() for j in request.app[MANAGER].jobs.values()]})


async def show_job(request: web.Request) -> web.Response:
    wait = _query(request, wait=_seconds).get("wait", 0)
    m, job_id = request.app[MANAGER], request.match_info["id"]
    job = m.job(job_id)
    await m.wait_for(lambda: job.ended, wait)
    return web.json_response(job.view())


async def show_rack(request: web.Request) -> web.Response:
    _query(request)
    return web.json_response(await request.app[MANAGER].rack_components())


async def openapi(request: web.Request) -> web.Response:
    _query(request)
    return web.json_response(DOCUMENT)


# ---- the checks -----------------------------------------------------------------------
async def _body(request: web.Request, schema: dict[str, Any]) -> dict[str, Any]:
    text = await request.text()
    try:
        body = json.loads(text)
    except ValueError as exc:
        raise ApiError(400, f"the body is no JSON: {exc}" if text.strip()
                       else "a JSON body is needed") from None
    check(body, schema, "body")
    return body


def _query(request: web.Request, **known: Any) -> dict[str, Any]:
    """The query parameters, each parsed by its function in `known`; 400 for others."""
    out = {}
    for name, value in request.query.items():
        if name not in known:
            allowed = f" (it takes {', '.join(known)})" if known else ""
            raise ApiError(400, f"unknown query parameter {name!r}{allowed}")
        out[name] = known[name](name, value)
    return out


def _boolean(name: str, value: str) -> bool:
    if value.lower() not in ("true", "false", "1", "0"):
        raise ApiError(400, f"?{name}= takes true or false, not {value!r}")
    return value.lower() in ("true", "1")


def _seconds(name: str, value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= WAIT_MAX_S:
        raise ApiError(400, f"?{name}= takes seconds from 0 to {WAIT_MAX_S:g}, not {value!r}")
    return seconds


@web.middleware
async def _json_errors(request: web.Request, handler: Any) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as exc:
        return web.json_response({"error": str(exc)}, status=exc.status)
    except web.HTTPException as exc:   # aiohttp's own: no route, wrong method, too large
        if exc.status < 400:
            raise
        headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
        return web.json_response({"error": _reason(request, exc)}, status=exc.status,
                                 headers=headers)
    except Exception as exc:   # a bug: said, not hidden
        log.exception("%s %s", request.method, request.path)
        return web.json_response({"error": f"internal error: {exc!r}"}, status=500)


def _reason(request: web.Request, exc: web.HTTPException) -> str:
    if isinstance(exc, web.HTTPMethodNotAllowed):
        return (f"{request.path} takes {', '.join(sorted(exc.allowed_methods))}, "
                f"not {request.method}")
    if isinstance(exc, web.HTTPNotFound):
        return f"no such path {request.path} (GET /openapi.json lists the API)"
    if isinstance(exc, web.HTTPRequestEntityTooLarge):
        return f"the body is over {HTTP_BODY_MAX_BYTES} bytes"
    return exc.reason
