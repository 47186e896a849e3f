"""The `roost` command: run, chat, init, doctor, pairing, memory."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import os
import signal
import sys
from collections.abc import Sequence

from bot import cli_access, cli_audit, cli_grants, cli_jobs, cli_mcp, cli_status
from bot.heap import freeze_long_lived
from bot.settings import ConfigError, Settings, load_settings

EXIT_CONFIG = 2
EXIT_ALREADY_RUNNING = 3

NO_PLATFORM = """\
No chat platform is configured, so there is nothing for `roost run` to serve.
Set:
  TELEGRAM_BOT_TOKEN=<token from @BotFather>   (and ROOST_OWNERS='["telegram:<your user id>"]')
and/or
  DISCORD_BOT_TOKEN=<token from the Developer Portal → Bot>   (and ROOST_OWNERS='["discord:<your user id>"]')
or talk to Roost in this terminal with:  roost chat"""


def main(argv: Sequence[str] | None = None) -> int:
    code = _main(argv)
    if argv is None:  # this is the process itself (console script, python -m bot.cli)
        # The interpreter's final collections walk every object the libraries created
        # (~250k: PTB, SQLAlchemy, pydantic, the anthropic SDK) several times: 3-4 s after
        # SIGTERM on a loaded machine, with everything already closed. Frozen objects are
        # skipped; nothing is left to flush by then (logging shuts down at exit as before).
        gc.freeze()
    return code


def _main(argv: Sequence[str] | None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    from bot.logs import RedactSecrets, guard_output, setup_logging

    guard_output(RedactSecrets([]))  # token shapes and URL passwords, even before settings
    try:
        settings = load_settings()
    except ConfigError as exc:
        print(f"roost: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    # Every exit path from here on (logs, tracebacks, warnings) goes through redaction.
    guard_output(setup_logging(args.log_level or settings.log_level, settings.secrets))
    handler = {
        "run": _run,
        "chat": _chat,
        "init": _init,
        "doctor": _doctor,
        "pairing": _pairing,
        "memory": _memory,
        "access": cli_access.run,
        "audit": cli_audit.run,
        "grants": cli_grants.run,
        "jobs": cli_jobs.run,
        "status": cli_status.run,
        "dashboard": _dashboard,
        "mcp": cli_mcp.run,
    }[args.command]
    try:
        return asyncio.run(handler(settings, args))
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # the process boundary: one clear line, never a secret
        return _failed(exc, settings)


def _failed(exc: Exception, settings: Settings) -> int:
    from bot.failures import describe_failure

    known = describe_failure(exc, settings)
    if known is None:  # a bug: the traceback helps, and it is redacted like every log line
        logging.getLogger("roost").error("roost.crashed", exc_info=exc)
        known = f"stopped by an unexpected error: {type(exc).__name__}: {exc}"
    elif logging.getLogger().isEnabledFor(logging.DEBUG):
        logging.getLogger("roost").debug("roost.start_failed", exc_info=exc)
    print(f"roost: {known}", file=sys.stderr)
    return 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="roost", description="Roost, a personal AI agent in your chats.")
    parser.add_argument("--log-level", help="DEBUG, INFO, WARNING (default from ROOST_LOG_LEVEL or INFO)")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("run", help="serve every configured chat platform")
    sub.add_parser("chat", help="talk to Roost in this terminal as the owner (main session)")
    sub.add_parser("init", help="create ROOST_HOME with the workspace and the database")
    sub.add_parser("doctor", help="check configuration, database, workspace and tokens")
    pairing = sub.add_parser("pairing", help="approve or list pairing requests")
    pairing_sub = pairing.add_subparsers(dest="action", required=True)
    approve = pairing_sub.add_parser("approve", help="approve a pairing code")
    approve.add_argument("platform", choices=["telegram", "discord"])
    approve.add_argument("code")
    pairing_sub.add_parser("list", help="list pending pairing requests")
    memory = sub.add_parser("memory", help="memory index maintenance")
    memory_sub = memory.add_subparsers(dest="action", required=True)
    memory_sub.add_parser("reindex", help="rebuild the memory search index from the files")
    cli_access.add_parser(sub)
    cli_audit.add_parser(sub)
    cli_grants.add_parser(sub)
    cli_jobs.add_parser(sub)
    cli_status.add_parser(sub)
    dashboard = sub.add_parser("dashboard", help="the local dashboard's login link")
    dashboard_sub = dashboard.add_subparsers(dest="action", required=True)
    dashboard_sub.add_parser("url", help="print the login link of the dashboard `roost run` serves")
    dashboard_sub.add_parser("rotate", help="replace the login link; every browser is logged out")
    cli_mcp.add_parser(sub)
    return parser


async def _run(settings: Settings, args: argparse.Namespace) -> int:
    from bot.platforms import configured_adapters

    adapters = configured_adapters(settings, lean=True)  # this process serves, nothing else
    if not adapters:
        print(NO_PLATFORM, file=sys.stderr)
        return EXIT_CONFIG
    dashboard_at = settings.dashboard.address
    if dashboard_at is not None:  # the dashboard's modules load only when it is on
        from bot.dashboard.server import RemoteRefused, check_address

        try:
            check_address(*dashboard_at, settings.dashboard.allow_remote)
        except RemoteRefused as exc:
            print(f"roost: {exc}", file=sys.stderr)
            return EXIT_CONFIG
    from bot.instance_lock import AlreadyRunning, hold_run_lock
    from bot.startup_migration import MigrationChild, MigrationFailed, needs_upgrade

    settings.home_dir.mkdir(parents=True, exist_ok=True)
    try:  # held until the process ends, however it ends (bot/instance_lock.py)
        _run_lock = hold_run_lock(settings.db_url)  # noqa: F841
    except AlreadyRunning as exc:
        print(f"roost: {exc}", file=sys.stderr)
        return EXIT_ALREADY_RUNNING
    child = None
    if await needs_upgrade(settings.db_url):  # Alembic stays out of the serving process (~10 MB)
        child = await MigrationChild.start(args.log_level)
    try:
        from bot.app import build  # imported while the child migrates
    except BaseException:
        if child is not None:
            await child.stop()
        raise
    if child is not None:
        try:
            await child.wait()
        except MigrationFailed as exc:
            print(f"roost: the database could not be migrated: {exc}", file=sys.stderr)
            return 1

    async with build(settings, adapters) as app:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stop.set)
        # Before any adapter delivers: what the last process accepted but never answered
        # (a crash, a kill, a shutdown with messages queued) goes first, once.
        await app.conversations.load_inbox()
        async with contextlib.AsyncExitStack() as running:
            # Closed last: /healthz answers 503 for the whole stop (a closed port at once
            # would hide "stopping" from the proxy's checks and from the operator).
            health_stack = contextlib.AsyncExitStack()
            running.push_async_callback(health_stack.aclose)
            for adapter in adapters:
                await adapter.start(app.conversations)
                running.push_async_callback(adapter.aclose)
            # Closed first (LIFO): runs stop with a visible notice while adapters are open;
            # queued messages stay in the inbox for the next start.
            running.push_async_callback(app.conversations.aclose)
            for adapter in adapters:  # first of all: another replica takes the messages in
                hand_over = getattr(adapter, "hand_over", None)
                if hand_over is not None:
                    running.push_async_callback(hand_over)
            dashboard_link = None
            if dashboard_at is not None:
                from bot.dashboard.server import start as start_dashboard

                started = await start_dashboard(app, adapters)
                if started is not None:
                    served, dashboard_link = started
                    running.push_async_callback(served.aclose)  # closed before the chats (LIFO)
            app.load_model_client()
            await app.conversations.recover_deliveries()
            await app.conversations.close_expired_cards(app.expired_at_start)
            await app.conversations.replay_inbox()
            # Start-up is done: full collections must not walk it again — nor the SDK's
            # ~200k objects once its background import has finished.
            freeze_long_lived()
            if app.lazy_llm is not None:
                app.lazy_llm.load().add_done_callback(
                    lambda f: None if f.cancelled() or f.exception() else freeze_long_lived()
                )
            health = None
            if settings.health_listen:  # a load balancer's check (bot/health.py)
                from bot.health import Health

                health = Health(app.storage.engine)
                await health.start(settings.health_listen)
                health_stack.push_async_callback(health.aclose)
            names = ", ".join(a.platform for a in adapters)
            print(f"Roost is running on {names}. Ctrl-C to stop.", file=sys.stderr)
            if dashboard_link is not None:
                print(f"Dashboard: {dashboard_link}", file=sys.stderr)
            await stop.wait()
            # A second Ctrl-C / SIGTERM while shutting down leaves at once: every accepted
            # message is already in the inbox, so a hard exit loses nothing.
            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(NotImplementedError):
                    loop.add_signal_handler(sig, _exit_now)
            print("Stopping: running answers end with a notice; queued messages wait for the next start.",
                  file=sys.stderr)
            if health is not None:  # the proxy sends nothing new here while this one stops
                health.stopping = True
                # Still serving until the proxy's check has seen the 503: a webhook server
                # closed first breaks the requests the proxy still sends here (502s).
                await asyncio.sleep(settings.health_drain_s)  # timing-ok: the proxy's check interval
    return 0


async def _dashboard(settings: Settings, args: argparse.Namespace) -> int:
    from bot.dashboard import login

    address = settings.dashboard.address
    if args.action == "rotate":
        login.rotate(settings.home_dir)
        print("Dashboard login link replaced; every browser logged in before must open the new one.")
    if address is None:
        print("The dashboard is off (ROOST_DASHBOARD__LISTEN is empty).", file=sys.stderr)
        return 1 if args.action == "url" else 0
    print(login.login_url(*address, login.current(settings.home_dir)))
    return 0


def _exit_now() -> None:
    print("roost: stopped without waiting (queued messages are kept for the next start).", file=sys.stderr)
    sys.stderr.flush()
    os._exit(130)


async def _chat(settings: Settings, args: argparse.Namespace) -> int:
    from adapters.console import ConsoleAdapter
    from bot.app import build

    console = ConsoleAdapter()
    # recover=False: a terminal opened beside `roost run` must not expire its live approvals.
    async with build(settings, [console], recover=False) as app:
        app.load_model_client()
        loop = asyncio.get_running_loop()

        def interrupt() -> None:
            # Ctrl-C stops the running answer; with nothing running it leaves.
            if not app.conversations.lanes.stop("main"):
                repl.cancel()

        repl = asyncio.create_task(_console_session(console, app))
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(signal.SIGINT, interrupt)
        with contextlib.suppress(asyncio.CancelledError):
            await repl
        await console.aclose()
    return 0


async def _console_session(console, app) -> None:  # noqa: ANN001
    await console.start(app.conversations)
    await console.repl()
    await app.conversations.lanes.drain()  # lines typed ahead are answered before leaving


async def _init(settings: Settings, args: argparse.Namespace) -> int:
    from bot.storage import Storage
    from workspace.bootstrap import ensure_workspace

    settings.home_dir.mkdir(parents=True, exist_ok=True)
    created = ensure_workspace(settings.workspace_dir)
    storage = await Storage.open(settings.db_url)
    await storage.aclose()
    print(f"Roost home: {settings.home_dir}")
    print(f"Workspace: {settings.workspace_dir} ({len(created)} files and folders created)")
    print(f"Database: {_safe_url(settings.db_url)} (migrated to the latest schema)")
    print("Next: set ANTHROPIC_API_KEY, then `roost chat`, or a bot token and `roost run`.")
    return 0


async def _doctor(settings: Settings, args: argparse.Namespace) -> int:
    from bot.doctor import run_checks

    checks = await run_checks(settings)
    width = max(len(c.name) for c in checks)
    for check in checks:
        mark = {"ok": "✓", "warn": "!", "fail": "✗"}[check.status]
        print(f"{mark} {check.name.ljust(width)}  {check.detail}")
        if check.fix and check.status != "ok":
            print(f"  {' ' * width}  fix: {check.fix}")
    return 1 if any(c.status == "fail" for c in checks) else 0


async def _pairing(settings: Settings, args: argparse.Namespace) -> int:
    from bot.operations import CLI
    from bot.operations.cli import operations

    async with operations(settings) as ops:
        if args.action == "list":
            pending = await ops.pending_pairings(CLI)
            if not pending:
                print("No pending pairing requests.")
            for p in pending:
                print(f"{p.platform} {p.code}  {p.user_name or ''} (user {p.user_id}), expires {p.expires_at:%Y-%m-%d %H:%M} UTC")
            return 0
        paired = await ops.approve_pairing(CLI, args.platform, args.code)
        if paired is None:
            print(f"No pending pairing code {args.code!r} on {args.platform} (wrong or expired).", file=sys.stderr)
            return 1
        print(f"Paired {paired.user_name or paired.user_id} ({args.platform} user {paired.user_id}).")
        return 0


async def _memory(settings: Settings, args: argparse.Namespace) -> int:
    from bot.storage import Storage
    from workspace.memory_index import reindex_memory

    storage = await Storage.open(settings.db_url)
    try:
        count = await reindex_memory(storage.engine, settings.workspace_dir)
        print(f"Memory index rebuilt: {count} files indexed.")
        return 0
    finally:
        await storage.aclose()


def _safe_url(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    if "@" in rest:
        rest = "***@" + rest.split("@", 1)[1]
    return f"{scheme}{sep}{rest}"


if __name__ == "__main__":
    raise SystemExit(main())
