"""The dashboard's pages and actions (Starlette). Every page is a thin caller of
`bot.operations`; every state-changing request carries the CSRF value of the session cookie;
every response carries the security headers; everything shown goes through Jinja2's
autoescape (tool outputs, group messages, file and job names come from untrusted people)."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jinja2
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from agent_core.approvals import Decision, ResolveOutcome
from bot.usage_report import cost as usage_cost
from bot.dashboard import views
from bot.dashboard.login import COOKIE, MAX_AGE_S, Keys, Session
from bot.operations import Actor, AuditQuery, Forbidden, Operations

log = logging.getLogger(__name__)
HERE = Path(__file__).parent

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'"
)
HEADERS = {
    "content-security-policy": CSP,
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",  # the login link carries the token
    "cache-control": "no-store",
    "cross-origin-opener-policy": "same-origin",
}
DECISIONS = {"once": Decision.ONCE, "always": Decision.ALWAYS, "deny": Decision.DENY}
JOB_OPS = ("run", "pause", "resume", "cancel")
KEEPALIVE_S = 15.0
TICK_S = 5.0


class Hub:
    """Server-sent events: each open page gets its own small queue of change names."""

    def __init__(self) -> None:
        self._queues: set[asyncio.Queue[str]] = set()
        self.closed = asyncio.Event()

    def publish(self, name: str) -> None:
        for queue in list(self._queues):
            with contextlib.suppress(asyncio.QueueFull):
                queue.put_nowait(name)

    @contextlib.contextmanager
    def subscribe(self) -> Any:
        queue: asyncio.Queue[str] = asyncio.Queue(maxsize=32)
        self._queues.add(queue)
        try:
            yield queue
        finally:
            self._queues.discard(queue)


class Dashboard:
    def __init__(
        self, ops: Operations, *, home: Path, actor: Actor, redact: Callable[[str], str],
        timezone: str = "UTC", now: Callable[[], datetime] = lambda: datetime.now().astimezone(),
        allowed_hosts: list[str] | None = None,
    ) -> None:  # fmt: skip
        self.ops = ops
        self.keys = Keys(home)
        self.actor = actor
        self.redact = redact
        self.timezone = timezone
        self.now = now
        self.allowed_hosts = allowed_hosts
        """Host headers served (None: any). Loopback only by default, so a web page whose
        name was rebound to 127.0.0.1 reaches nothing (DNS rebinding)."""
        self.hub = Hub()
        self._notices: dict[str, str] = {}
        """What the last action said, per session, shown once after its redirect (never taken
        from the URL: a link must not make the page say anything)."""
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=True,  # every page, every fragment: .html or not
            undefined=jinja2.StrictUndefined,
        )
        self.env.filters["when"] = _when
        self.env.filters["cost"] = usage_cost  # the same words as /usage: "cost unknown" without prices
        self.env.filters["ago"] = lambda at: _ago(at, datetime.now(UTC))
        if ops.live.gate is not None:
            ops.live.gate.listeners.append(lambda: self.hub.publish("approvals"))

    # -- plumbing --------------------------------------------------------------------
    def render(self, name: str, request: Request, session: Session | None, status: int = 200, **ctx: Any) -> HTMLResponse:
        page = self.env.get_template(name).render(
            csrf=session.csrf if session else "", path=request.url.path, **ctx
        )
        return HTMLResponse(page, status_code=status)

    def tell(self, session: Session, text: str) -> None:
        self._notices.pop(session.csrf, None)
        self._notices[session.csrf] = text
        while len(self._notices) > 256:  # bounded: the oldest goes
            del self._notices[next(iter(self._notices))]

    def told(self, session: Session) -> str:
        return self._notices.pop(session.csrf, "")

    def session_of(self, request: Request) -> Session | None:
        return self.keys.session(request.cookies.get(COOKIE))

    def unauthorized(self, request: Request) -> HTMLResponse:
        return self.render("401.html", request, None, status=401)

    def page(self, handler: Callable[[Request, Session], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            session = self.session_of(request)
            if session is None:
                return self.unauthorized(request)
            try:
                return await handler(request, session)
            except Forbidden as exc:
                return PlainTextResponse(str(exc), status_code=403)

        return endpoint

    def action(self, handler: Callable[[Request, Session, dict[str, str]], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        """A POST: logged in, same origin, and the session's CSRF value in the form or header."""

        async def endpoint(request: Request) -> Response:
            session = self.session_of(request)
            if session is None:
                return self.unauthorized(request)
            form = {k: v[0] for k, v in parse_qs((await request.body()).decode("utf-8", "replace")).items()}
            offered = request.headers.get("x-csrf-token") or form.get("csrf", "")
            if not offered or not hmac.compare_digest(offered.encode(), session.csrf.encode()):
                return PlainTextResponse("Missing or wrong CSRF token; reload the page.", status_code=403)
            origin = request.headers.get("origin")
            if origin and origin != "null" and urlsplit(origin).netloc != request.headers.get("host"):
                return PlainTextResponse("Cross-origin request refused.", status_code=403)
            try:
                return await handler(request, session, form)
            except Forbidden as exc:
                return PlainTextResponse(str(exc), status_code=403)

        return endpoint

    # -- login -----------------------------------------------------------------------
    async def login(self, request: Request) -> Response:
        if not self.keys.token_ok(request.query_params.get("token", "")):
            return self.unauthorized(request)
        cookie, _ = self.keys.new_cookie()
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(COOKIE, cookie, max_age=MAX_AGE_S, httponly=True, samesite="strict", path="/")
        return response

    async def logout(self, request: Request, session: Session, form: dict[str, str]) -> Response:
        response = RedirectResponse("/login-ended", status_code=303)
        response.delete_cookie(COOKIE, path="/")
        return response

    async def logged_out(self, request: Request) -> Response:
        return self.render("401.html", request, None, status=200, ended=True)

    # -- pages -----------------------------------------------------------------------
    async def overview(self, request: Request, session: Session) -> Response:
        data = await self.ops.overview(self.actor, self.now())
        template = "overview_body.html" if request.query_params.get("fragment") else "overview.html"
        return self.render(template, request, session, o=data, now=datetime.now(UTC))

    async def approvals(self, request: Request, session: Session) -> Response:
        pending = await self.ops.pending_approvals(self.actor)
        template = "approvals_body.html" if request.query_params.get("fragment") else "approvals.html"
        notice = "" if request.query_params.get("fragment") else self.told(session)
        return self.render(template, request, session, pending=pending, now=datetime.now(UTC), notice=notice)

    async def decide(self, request: Request, session: Session, form: dict[str, str]) -> Response:
        decision = DECISIONS.get(form.get("decision", ""))
        if decision is None:
            return PlainTextResponse("decision must be once, always or deny", status_code=400)
        result = await self.ops.decide(self.actor, request.path_params["approval_id"], decision)
        notice = {
            ResolveOutcome.RESOLVED: "Decided.",
            ResolveOutcome.ALREADY_DECIDED: "Already decided; nothing changed.",
            ResolveOutcome.UNKNOWN: "No such approval.",
            ResolveOutcome.NOT_YOURS: "You may not decide this approval.",
        }[result.outcome]
        if request.headers.get("x-requested-with") == "fetch":
            return PlainTextResponse(notice, status_code=200 if result.outcome is ResolveOutcome.RESOLVED else 409)
        self.tell(session, notice)
        return RedirectResponse("/approvals", status_code=303)

    async def sessions(self, request: Request, session: Session) -> Response:
        page = _int(request.query_params.get("page"))
        rows = await self.ops.sessions(self.actor, page)
        return self.render("sessions.html", request, session, sessions=rows, page=page)

    async def runs(self, request: Request, session: Session) -> Response:
        page = _int(request.query_params.get("page"))
        key = request.query_params.get("session") or None
        q = request.query_params.get("q", "").strip()
        rows = await self.ops.runs(self.actor, session_key=key, search=q or None, page=page)
        return self.render("runs.html", request, session, runs=rows, page=page, session_key=key or "", q=q)

    async def run(self, request: Request, session: Session) -> Response:
        data = await self.ops.run_timeline(self.actor, request.path_params["run_id"])
        if data is None:
            return self.render("missing.html", request, session, status=404, what="run")
        shown = views.timeline(data, self.redact)
        return self.render("run.html", request, session, data=data, t=shown)

    async def jobs(self, request: Request, session: Session) -> Response:
        rows = await self.ops.jobs(self.actor, include_ended=bool(request.query_params.get("all")))
        return self.render("jobs.html", request, session, jobs=rows, tz=self.timezone, notice=self.told(session))

    async def job_action(self, request: Request, session: Session, form: dict[str, str]) -> Response:
        op = request.path_params["op"]
        if op not in JOB_OPS:
            return PlainTextResponse("unknown job action", status_code=400)
        _, answer = await self.ops.operate_job(self.actor, op, request.path_params["job_id"])  # type: ignore[arg-type]
        self.tell(session, answer)
        return RedirectResponse("/jobs", status_code=303)

    async def usage(self, request: Request, session: Session) -> Response:
        now = self.now()
        windows = await self.ops.usage_windows(self.actor, now)
        days = await self.ops.usage_by_day(self.actor, now)
        today_total, today_sessions = windows["Today"]
        week_total, week_sessions = windows["This week"]
        by_model = await self.ops.usage_by_model(self.actor, now - timedelta(days=7))
        return self.render(
            "usage.html", request, session, today=today_total, week=week_total, today_sessions=today_sessions,
            week_sessions=week_sessions, day_bars=views.bars([(d, views.tokens(t)) for d, t in days], _tokens),
            cost_bars=views.bars([(d, t.cost_usd) for d, t in days if t.unpriced_runs < t.runs], lambda v: f"${v:.4f}"),
            model_bars=views.bars([(m, views.tokens(t)) for m, t in by_model.items()], _tokens),
            session_bars=views.bars([(k, views.tokens(t)) for k, t in week_sessions.items()], _tokens),
            budgets=await self.ops.budgets(self.actor, now),
        )  # fmt: skip

    async def audit(self, request: Request, session: Session) -> Response:
        query, error = self._audit_query(request)
        rows = await self.ops.audit(self.actor, query) if error is None else []
        return self.render("audit.html", request, session, rows=list(reversed(rows)), f=request.query_params,
                           error=error, qs=request.url.query)  # fmt: skip

    async def audit_export(self, request: Request, session: Session) -> Response:
        fmt = request.path_params["fmt"]
        if fmt not in ("json", "csv"):
            return PlainTextResponse("json or csv", status_code=404)
        query, error = self._audit_query(request, limit=None)
        if error is not None:
            return PlainTextResponse(error, status_code=400)
        body = await self.ops.export_audit(self.actor, query, fmt)  # type: ignore[arg-type]
        media = "application/json" if fmt == "json" else "text/csv"
        return Response(body, media_type=media,
                        headers={"content-disposition": f'attachment; filename="roost-audit.{fmt}"'})  # fmt: skip

    def _audit_query(self, request: Request, limit: int | None = 200) -> tuple[AuditQuery, str | None]:
        from bot.cli_audit import parse_since

        p = request.query_params
        now = datetime.now(UTC)
        try:
            since = parse_since(p["since"], now) if p.get("since") else None
            until = parse_since(p["until"], now) if p.get("until") else None
        except ValueError as exc:
            return AuditQuery(), str(exc).replace("--since", "since/until")
        return AuditQuery(
            session_key=p.get("session") or None, actor=p.get("actor") or None, tool=p.get("tool") or None,
            decision=p.get("decision") or None, kind=p.get("kind") or None, since=since, until=until, limit=limit,
        ), None  # fmt: skip

    async def memory(self, request: Request, session: Session) -> Response:
        q = request.query_params.get("q", "").strip()
        files = await asyncio.to_thread(self.ops.memory_files, self.actor)
        hits = []
        if q:
            for name, text in files:
                for number, line in enumerate(text.splitlines(), 1):
                    if q.lower() in line.lower():
                        hits.append((name, number, line))
        return self.render("memory.html", request, session, files=files, q=q, hits=hits[:200])

    async def policy(self, request: Request, session: Session) -> Response:
        return self.render("policy.html", request, session, p=self.ops.policy(self.actor),
                           breakers=self.ops.breakers(self.actor))  # fmt: skip

    async def events(self, request: Request, session: Session) -> Response:
        async def stream() -> AsyncIterator[bytes]:
            with self.hub.subscribe() as queue:
                yield b"retry: 2000\n\n"
                while not self.hub.closed.is_set():
                    try:  # not `asyncio.wait_for`: it can swallow the cancel of a closing stream (3.11)
                        async with asyncio.timeout(TICK_S):
                            name = await queue.get()
                    except TimeoutError:
                        yield b"event: tick\ndata: 1\n\n"
                        continue
                    yield f"event: {name}\ndata: 1\n\n".encode()

        return StreamingResponse(stream(), media_type="text/event-stream", headers={"x-accel-buffering": "no"})

    # -- the app ---------------------------------------------------------------------
    def app(self) -> Any:
        routes = [
            Route("/login", self.login),
            Route("/login-ended", self.logged_out),
            Route("/logout", self.action(self.logout), methods=["POST"]),
            Route("/", self.page(self.overview)),
            Route("/approvals", self.page(self.approvals)),
            Route("/approvals/{approval_id}", self.action(self.decide), methods=["POST"]),
            Route("/sessions", self.page(self.sessions)),
            Route("/runs", self.page(self.runs)),
            Route("/runs/{run_id}", self.page(self.run)),
            Route("/jobs", self.page(self.jobs)),
            Route("/jobs/{job_id}/{op}", self.action(self.job_action), methods=["POST"]),
            Route("/usage", self.page(self.usage)),
            Route("/audit", self.page(self.audit)),
            Route("/audit/export.{fmt}", self.page(self.audit_export)),
            Route("/memory", self.page(self.memory)),
            Route("/policy", self.page(self.policy)),
            Route("/events", self.page(self.events)),
            Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
        ]
        app: Any = Starlette(routes=routes)
        if self.allowed_hosts is not None:
            from starlette.middleware.trustedhost import TrustedHostMiddleware

            app = TrustedHostMiddleware(app, allowed_hosts=self.allowed_hosts, www_redirect=False)
        return SecurityHeaders(app)


class SecurityHeaders:
    """Adds the security headers to every response, errors and static files included."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.decode().lower() not in HEADERS]
                headers += [(k.encode(), v.encode()) for k, v in HEADERS.items()]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_headers)


def _int(value: str | None) -> int:
    try:
        return max(int(value or 0), 0)
    except ValueError:
        return 0


def _tokens(value: float) -> str:
    return f"{int(value):,} tokens"


def _when(at: datetime | None) -> str:
    return "–" if at is None else at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _ago(at: datetime | None, now: datetime) -> str:
    if at is None:
        return "–"
    seconds = int((at - now).total_seconds())
    later = seconds >= 0
    seconds = abs(seconds)
    text = f"{seconds} s" if seconds < 120 else f"{seconds // 60} min" if seconds < 7200 else f"{seconds // 3600} h"
    return f"in {text}" if later else f"{text} ago"
