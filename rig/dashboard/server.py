"""The dashboard's web app (Starlette): the fleet and run pages, their data as server-sent
events, and (with `--operator`) the command endpoint.

Pages are static files of this package; everything they show comes as JSON and is put in the
page as text (never as markup), and the Content-Security-Policy lets no script run but ours.
A page that connects gets the current state first, then the updates; the browser's EventSource
reconnects by itself when the server goes away.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, MutableMapping
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    FileResponse,
    JSONResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from rig.bench.broker import MqttSettings
from rig.dashboard.auth import COOKIE, Login
from rig.dashboard.control import Operator, command_for
from rig.dashboard.hub import Hub
from rig.mqtt.commands import Refused

STATIC = Path(__file__).with_name("static")
#: A comment line on an idle stream this often [s], so proxies and the browser keep it open.
KEEPALIVE_S = 15.0
#: How long a page's stream gathers updates into one message [s].
COALESCE_S = 0.05
#: Largest request body the command and login endpoints read [bytes].
MAX_BODY = 4096
HEADERS = {
    "content-security-policy": "default-src 'self'; script-src 'self'; style-src 'self'; "
                               "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none';"
                               " base-uri 'none'; form-action 'self'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}
#: What may be seen without logging in: the login page and the files it needs.
OPEN_PATHS = ("/login", "/static/")


class Guard:
    """ASGI middleware: security headers on every response; without a session (when a login
    is required), pages redirect to /login and the API answers 401."""

    def __init__(self, app: ASGIApp, login: Login) -> None:
        self.app, self.login = app, login

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]

        async def with_headers(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = list(message["headers"]) + [
                    (k.encode(), v.encode()) for k, v in HEADERS.items()]
            await send(message)

        if self.login.required and not path.startswith(OPEN_PATHS):
            session = Request(scope).cookies.get(COOKIE)
            if not self.login.valid(session):
                response: Response = (JSONResponse({"error": "log in first"}, 401)
                                      if path.startswith("/api/")
                                      else RedirectResponse("/login", 303))
                await response(scope, receive, with_headers)
                return
        await self.app(scope, receive, with_headers)


def _run_of(request: Request) -> tuple[str, str] | None:
    rig, run = request.query_params.get("rig"), request.query_params.get("run")
    return (rig, run) if rig and run else None


def create_app(hub: Hub, *, viewer: MqttSettings | None, login: Login,
               operator: MqttSettings | None = None) -> ASGIApp:
    """The ASGI app: follows the broker as `viewer` (None: not at all, for tests that feed
    the hub themselves) while it runs; `operator` turns the start and stop controls on."""
    desk = Operator(operator) if operator is not None else None

    def config() -> dict[str, Any]:
        return {"operator": desk is not None, "login": login.required}

    async def page(request: Request) -> Response:
        return FileResponse(STATIC / "fleet.html")

    async def run_page(request: Request) -> Response:
        return FileResponse(STATIC / "run.html")

    async def login_page(request: Request) -> Response:
        return FileResponse(STATIC / "login.html")

    async def state(request: Request) -> Response:
        return JSONResponse({**hub.snapshot(_run_of(request)), **config()})

    async def stream(request: Request) -> Response:
        run = _run_of(request)
        page_ = hub.attach(run)

        async def events() -> AsyncIterator[str]:
            try:
                yield _sse({**hub.snapshot(run), **config()})
                while True:
                    try:
                        batch = await asyncio.wait_for(page_.queue.get(), KEEPALIVE_S)
                    except TimeoutError:
                        yield ": keepalive\n\n"
                        continue
                    if batch is None:
                        return
                    # what else comes within COALESCE_S goes in the same message, a rig's
                    # card once per state: 20 rigs at 10 Hz are 20 messages a second to a
                    # page, not 200
                    await asyncio.sleep(COALESCE_S)
                    end = False
                    while not page_.queue.empty():
                        more = page_.queue.get_nowait()
                        if more is None:
                            end = True
                            break
                        batch.extend(more)
                    yield _sse({"type": "batch", "updates": latest_cards(batch)})
                    if end:
                        return
            finally:
                hub.detach(page_)

        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"x-accel-buffering": "no"})

    async def do_login(request: Request) -> Response:
        body = await _json_body(request)
        token = body.get("token") if isinstance(body, dict) else None
        session = login.open(token) if isinstance(token, str) else None
        if session is None:
            await asyncio.sleep(0.5)  # a wrong token costs time: no fast guessing
            return JSONResponse({"ok": False, "reason": "wrong token"}, 403)
        response = JSONResponse({"ok": True})
        response.set_cookie(COOKIE, session, httponly=True, samesite="strict", path="/")
        return response

    async def do_logout(request: Request) -> Response:
        login.close(request.cookies.get(COOKIE))
        response = JSONResponse({"ok": True})
        response.delete_cookie(COOKIE, path="/")
        return response

    async def command(request: Request) -> Response:
        if desk is None:
            return JSONResponse({"ok": False, "reason": "this dashboard is read-only "
                                 "(start it with --operator for controls)"}, 403)
        if request.headers.get("content-type", "").split(";")[0] != "application/json":
            return JSONResponse({"ok": False, "reason": "expected application/json"}, 415)
        try:
            rig, cmd = command_for(await _json_body(request))
        except Refused as exc:
            return JSONResponse({"ok": False, "reason": exc.reason}, 400)
        if rig not in hub.fleet.board.rows:
            return JSONResponse({"ok": False, "reason": "no such rig on the broker"}, 404)
        reply = await desk.send(rig, cmd)
        return JSONResponse({"ok": reply.get("ok") is True,
                             "reason": str(reply.get("reason") or "")[:300],
                             "request_id": cmd["request_id"]})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        task = asyncio.create_task(hub.follow(viewer)) if viewer is not None else None
        try:
            yield
        finally:
            hub.close_pages()
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    routes = [
        Route("/", page), Route("/run/{rig}/{run_id}", run_page),
        Route("/login", login_page), Route("/login", do_login, methods=["POST"]),
        Route("/logout", do_logout, methods=["POST"]),
        Route("/api/state", state), Route("/api/stream", stream),
        Route("/api/command", command, methods=["POST"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    return Guard(Starlette(routes=routes, lifespan=lifespan), login)


def latest_cards(updates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`updates` with a rig's card left out where the next card of that rig in the list has
    the same state (it supersedes it); every state change and every other update (run
    events, power points, cells) is kept, in order."""
    keep = [True] * len(updates)
    later: dict[str, Any] = {}
    for i in range(len(updates) - 1, -1, -1):
        u = updates[i]
        if u["type"] != "rig":
            continue
        rig, state = u["rig"]["rig"], u["rig"]["state"]
        keep[i] = later.get(rig, object()) != state
        later[rig] = state
    return [u for u, k in zip(updates, keep, strict=True) if k]


def _sse(data: dict[str, Any]) -> str:
    # json.dumps escapes newlines: one data line per message
    return f"data: {json.dumps(data, separators=(',', ':'))}\n\n"


async def _json_body(request: Request) -> Any:
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            return None
    try:
        return json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
