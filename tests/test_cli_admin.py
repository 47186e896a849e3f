"""`roost access` and `roost audit` as the owner runs them on the machine (subprocesses)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agent_core.ports import AuditEntry
from bot.cli_audit import parse_since
from bot.storage import Storage

ROOST = [sys.executable, "-m", "bot.cli"]
BOT_TOKEN = "123456:SECRET-token-for-the-cli-admin-test"


def env_for(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROOST_", "TELEGRAM_", "DISCORD_", "ANTHROPIC_"))}
    env.update({"ROOST_HOME": str(home), "TELEGRAM_BOT_TOKEN": BOT_TOKEN, "ROOST_OWNERS": '["telegram:1"]',
                "ROOST_TELEGRAM__ALLOWED_GROUPS": '["-100777"]', **extra})
    return env


def roost(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ROOST, *args], env=env, capture_output=True, text=True, timeout=60)


def test_since_takes_durations_and_iso_dates() -> None:
    now = datetime(2026, 11, 23, 15, 0, tzinfo=UTC)
    assert parse_since("2h", now) == now - timedelta(hours=2)
    assert parse_since("30m", now) == now - timedelta(minutes=30)
    assert parse_since("1d", now) == now - timedelta(days=1)
    assert parse_since("1w", now) == now - timedelta(weeks=1)
    assert parse_since("2026-11-20T08:00:00+00:00", now) == datetime(2026, 11, 20, 8, tzinfo=UTC)
    assert parse_since("2026-11-20", now).tzinfo is not None  # local midnight, made aware
    with pytest.raises(ValueError, match="30m, 2h, 1d"):
        parse_since("yesterday", now)


def test_access_allow_list_revoke_on_the_machine(tmp_path: Path) -> None:
    env = env_for(tmp_path / "home")
    allowed = roost("access", "allow", "telegram:42", env=env)
    assert allowed.returncode == 0, allowed.stderr
    assert allowed.stdout.strip() == "telegram:42 may now talk to me privately."
    group = roost("access", "allow", "group", "telegram:-100888", env=env)
    assert group.stdout.strip() == "I'll answer in group telegram:-100888 when mentioned."
    listing = roost("access", "list", env=env)
    assert listing.returncode == 0, listing.stderr
    for line in ("Owners (ROOST_OWNERS): telegram:1", "telegram:42", "telegram: -100777", "group telegram:-100888"):
        assert line in listing.stdout
    revoked = roost("access", "revoke", "telegram:42", env=env)
    assert revoked.stdout.startswith("telegram:42 can no longer talk to me")
    configured = roost("access", "revoke", "group", "telegram:-100777", env=env)
    assert "allowed by the configuration" in configured.stdout
    bad = roost("access", "allow", "bob", env=env)
    assert bad.returncode == 2 and "is not like 'telegram:42'" in bad.stderr and "Traceback" not in bad.stderr

    trail = roost("audit", "--json", env=env)
    assert trail.returncode == 0, trail.stderr
    rows = json.loads(trail.stdout)
    assert [(r["actor"], r["subject"], r["decision"]) for r in rows] == [
        ("cli", "telegram:42", "allowed"),
        ("cli", "group telegram:-100888", "allowed"),
        ("cli", "telegram:42", "revoked"),
        ("cli", "group telegram:-100777", "refused"),
    ]


def test_audit_filters_by_session_and_time_and_never_prints_a_secret_and_cli_pairing_is_audited(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = env_for(home)

    async def seed() -> None:
        clock_now = [datetime.now(UTC) - timedelta(days=2)]
        storage = await Storage.open(f"sqlite+aiosqlite:///{home / 'roost.db'}", clock=lambda: clock_now[0])
        try:
            await storage.audit(AuditEntry(kind="tool_call", actor="telegram:1", session_key="main", subject="exec",
                                           detail=f"curl https://api.telegram.org/bot{BOT_TOKEN}/getMe"))
            clock_now[0] = datetime.now(UTC)
            await storage.audit(AuditEntry(kind="tool_call", actor="telegram:1", session_key="main", subject="read_file",
                                           detail='{"path": "notes.md"}', decision="allow", status="ok", size=12))
            await storage.audit(AuditEntry(kind="access", actor="telegram:9", session_key="group:telegram:-5",
                                           subject="/new", decision="denied"))
            await storage.create_pairing("telegram", "77", "Sam", "ABCDEFGH", datetime.now(UTC) + timedelta(hours=1))
        finally:
            await storage.aclose()

    home.mkdir(parents=True)
    asyncio.run(seed())
    everything = roost("audit", env=env)
    assert everything.returncode == 0, everything.stderr
    assert len(everything.stdout.splitlines()) == 3 and BOT_TOKEN not in everything.stdout
    recent = roost("audit", "--since", "1d", env=env)
    assert "read_file" in recent.stdout and "/new" in recent.stdout and "exec" not in recent.stdout
    main = json.loads(roost("audit", "--session", "main", "--json", env=env).stdout)
    assert [r["subject"] for r in main] == ["exec", "read_file"] and BOT_TOKEN not in json.dumps(main)
    none = roost("audit", "--session", "dm:telegram:404", env=env)
    assert none.stdout.strip() == "No audit entries match."
    bad = roost("audit", "--since", "soon", env=env)
    assert bad.returncode == 2 and "--since 'soon'" in bad.stderr
    assert roost("pairing", "approve", "telegram", "abcdefgh", env=env).returncode == 0
    last = json.loads(roost("audit", "--limit", "1", "--json", env=env).stdout)
    assert [(r["kind"], r["actor"], r["subject"], r["decision"]) for r in last] == [
        ("pairing", "cli", "telegram:77", "approved")
    ]
