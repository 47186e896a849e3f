"""The `roost` command as a user runs it: subprocesses and a pseudo-terminal."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest

from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import Text, ToolUse, Reply, reply_text, reply_tools, user_blocks
from tests.fakes.telegram_api import FakeTelegram

ROOST = [sys.executable, "-m", "bot.cli"]
SECRET_KEY = "sk-test-SECRET-abcdef123456"


def env_for(home: Path, fake: FakeAnthropic | None = None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROOST_", "TELEGRAM_", "DISCORD_", "ANTHROPIC_"))}
    env.update({"ROOST_HOME": str(home), "ROOST_AGENT__MAX_RETRIES": "0", "ANTHROPIC_API_KEY": SECRET_KEY,
                "PYTHONUNBUFFERED": "1"})
    if fake is not None:
        env["ANTHROPIC_BASE_URL"] = fake.base_url
    env.update(extra)
    return env


def roost(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ROOST, *args], env=env, capture_output=True, text=True, timeout=60)


def test_run_without_a_platform_says_what_to_set(tmp_path: Path) -> None:
    result = roost("run", env=env_for(tmp_path / "home"))
    assert result.returncode == 2
    assert "TELEGRAM_BOT_TOKEN" in result.stderr and "roost chat" in result.stderr


def test_invalid_config_is_one_clear_error_naming_the_key(tmp_path: Path) -> None:
    result = roost("doctor", env=env_for(tmp_path / "home", ROOST_AGENT__MAX_TURNS="lots"))
    assert result.returncode == 2
    assert "ROOST_AGENT__MAX_TURNS" in result.stderr and "Traceback" not in result.stderr
    result = roost("doctor", env=env_for(tmp_path / "home", ROOST_OWNERS='["alice"]'))
    assert result.returncode == 2 and "ROOST_OWNERS" in result.stderr
    result = roost("run", env=env_for(tmp_path / "home", TELEGRAM_BOT_TOKEN="1:x", ROOST_TELEGRAM__MODE="webhook",
                                      ROOST_TELEGRAM__WEBHOOK_URL="https://example.org/hook"))
    assert result.returncode == 2 and "ROOST_TELEGRAM__WEBHOOK_SECRET" in result.stderr


def test_init_creates_workspace_and_database_and_doctor_reports(tmp_path: Path) -> None:
    home = tmp_path / "home"
    result = roost("init", env=env_for(home))
    assert result.returncode == 0, result.stderr
    for name in ("SOUL.md", "IDENTITY.md", "AGENTS.md", "USER.md", "MEMORY.md", "HEARTBEAT.md"):
        assert (home / "workspace" / name).is_file()
    assert (home / "workspace" / "memory").is_dir() and (home / "workspace" / "skills").is_dir()
    assert (home / "roost.db").is_file()
    doctor = roost("doctor", env=env_for(home))
    assert "✓ workspace" in doctor.stdout and "✓ database" in doctor.stdout
    assert "telegram" in doctor.stdout and "fix: TELEGRAM_BOT_TOKEN" in doctor.stdout
    assert SECRET_KEY not in doctor.stdout + doctor.stderr
    missing_key = roost("doctor", env={**env_for(home), "ANTHROPIC_API_KEY": ""})
    assert missing_key.returncode == 1 and "ANTHROPIC_API_KEY" in missing_key.stdout


def spawn_chat(home: Path, fake: FakeAnthropic) -> pexpect.spawn:
    child = pexpect.spawn(
        ROOST[0], [*ROOST[1:], "chat"], env=env_for(home, fake), encoding="utf-8", timeout=20,
        cwd=str(Path(__file__).parent.parent),
    )
    child.expect_exact("you> ")
    return child


def test_terminal_chat_streams_and_asks_before_risky_actions(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with FakeAnthropic() as fake:
        fake.script(
            Reply(Text("Hello from the fake model, streamed in pieces.", chunk_size=5)),
            reply_tools(ToolUse("exec", {"command": "echo yes-ran > approved.txt"})),
            reply_text("I ran it."),
            reply_tools(ToolUse("exec", {"command": "echo no-ran > denied.txt"})),
            reply_text("Understood, not running it."),
        )
        child = spawn_chat(home, fake)
        try:
            child.sendline("hello")
            child.expect_exact("Hello from the fake model, streamed in pieces.")
            child.expect_exact("you> ")

            child.sendline("make a file")
            child.expect_exact("echo yes-ran > approved.txt")
            child.expect_exact("approve? [y]es / [a]lways in this session / [n]o")
            child.sendline("y")
            child.expect_exact("I ran it.")
            child.expect_exact("you> ")
            assert (home / "workspace" / "approved.txt").read_text().strip() == "yes-ran"

            child.sendline("make another")
            child.expect_exact("approve? [y]es / [a]lways in this session / [n]o")
            child.sendline("n")
            child.expect_exact("Understood, not running it.")
            child.expect_exact("you> ")
            assert not (home / "workspace" / "denied.txt").exists()
            denial = user_blocks(fake.requests[-1].json)[0]
            assert denial["is_error"] and "denied" in denial["content"]

            child.sendeof()
            child.expect(pexpect.EOF)
        finally:
            child.close(force=True)
        transcript = child.before or ""
        assert SECRET_KEY not in transcript


def test_piped_lines_are_all_answered_and_eof_denies_pending_approvals(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with FakeAnthropic() as fake:
        fake.script(
            reply_text("first answer"),
            reply_text("second answer"),
            reply_tools(ToolUse("exec", {"command": "echo x > never.txt"})),
            reply_text("ok, it was denied"),
        )
        result = subprocess.run(
            [*ROOST, "chat"], env=env_for(home, fake, ROOST_AGENT__QUEUE_MODE="followup"),
            input=b"q1\nq2\nrun it\n", capture_output=True, timeout=60,
        )
        out = result.stdout.decode()
        assert result.returncode == 0, result.stderr.decode()
        assert "first answer" in out and "second answer" in out and "ok, it was denied" in out
        assert not (home / "workspace" / "never.txt").exists()
        assert len(fake.requests) == 4


def test_invalid_utf8_on_stdin_does_not_break_the_session(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with FakeAnthropic() as fake:
        result = subprocess.run(
            [*ROOST, "chat"], env={**env_for(home, fake), "LC_ALL": "C.UTF-8"}, input=b"caf\xe9\nnext\n",
            capture_output=True, timeout=60,
        )
        assert result.returncode == 0, result.stderr.decode()
        assert [r.status for r in fake.requests] == [200, 200]
        assert "caf\ufffd" in user_blocks(fake.requests[0].json)[-1]["text"]


BAD_TOKEN = "222222:REJECTED-token_abcdefghijklmnopqrstuv"


@pytest.mark.parametrize(("answer", "log_level"), [(401, "INFO"), (401, "DEBUG"), (404, "INFO")])
def test_rejected_bot_token_is_never_printed_when_start_up_fails(tmp_path: Path, answer: int, log_level: str) -> None:
    """Reproduced: python-telegram-bot's InvalidToken quotes the token, and its traceback
    bypassed the log filter. The fake answers getMe with 401 (wrong token) or 404 (wrong
    path); `roost run` ends with one line naming the setting, at any log level."""
    with FakeTelegram(token="111:right") as tg:
        base = tg.base_url if answer == 401 else tg.base_url.replace("/bot", "/missing/bot")
        result = roost("--log-level", log_level, "run", env=env_for(
            tmp_path / "home", TELEGRAM_BOT_TOKEN=BAD_TOKEN, ROOST_TELEGRAM__BASE_URL=base))
    if answer == 401:
        assert [c.status for c in tg.calls if c.method == "getMe"] == [401]
    output = result.stdout + result.stderr
    assert result.returncode == 1
    assert BAD_TOKEN not in output and "REJECTED-token" not in output and SECRET_KEY not in output
    assert result.stderr.rstrip().splitlines()[-1] == (
        "roost: Telegram rejected the bot token (getMe answered Unauthorized or Not Found). "
        "Check TELEGRAM_BOT_TOKEN: copy it again from @BotFather.")
    if log_level == "INFO":
        assert "Traceback" not in output


UNREACHABLE_PG = "postgresql+asyncpg://roost:pw-SECRET-5678@127.0.0.1:1/roost"


def test_unreachable_postgresql_is_one_clear_line_not_a_traceback(tmp_path: Path) -> None:
    env = env_for(tmp_path / "home", ROOST_DATABASE_URL=UNREACHABLE_PG, TELEGRAM_BOT_TOKEN="1:x")
    run = roost("run", env=env)
    assert run.returncode == 1
    assert "Traceback" not in run.stderr and "pw-SECRET" not in run.stdout + run.stderr
    assert run.stderr.strip().splitlines()[-1].startswith(
        "roost: cannot use the database postgresql+asyncpg://***@127.0.0.1:1/roost: ConnectionRefusedError")
    doctor = roost("doctor", env=env)
    assert doctor.returncode == 1
    assert "Traceback" not in doctor.stderr and "pw-SECRET" not in doctor.stdout + doctor.stderr
    assert re.search(r"^✗ database +postgresql\+asyncpg://\*\*\*@127\.0\.0\.1:1/roost: cannot connect",
                     doctor.stdout, re.MULTILINE), doctor.stdout


def test_doctor_never_creates_files(tmp_path: Path) -> None:
    absent, empty = tmp_path / "absent", tmp_path / "empty"
    empty.mkdir()
    for home in (absent, empty):
        result = roost("doctor", env=env_for(home))
        assert result.returncode == 1 and "Traceback" not in result.stderr
        assert "! database" in result.stdout and "not created yet" in result.stdout
    assert not absent.exists()
    assert list(empty.iterdir()) == []
