"""Nothing `exec` runs can read a configured secret, by any route: Roost's environment
(`/proc/$PPID/environ`, any `/proc/<roost pid>/*`), its config file, its database, its logs.

Reproduced before the sandbox: `cat /proc/$PPID/environ` printed TELEGRAM_BOT_TOKEN and
ANTHROPIC_API_KEY. The attack runs through the real tool, started by a model tool call
and an owner's approval, in a real `roost run` process and in `bot.app.build`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agent_core.approvals import Decision
from agent_core.events import ApprovalRequested
from tests.app_harness import OWNER_ID, running_app
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import ToolUse, reply_text, reply_tools, user_blocks
from tests.fakes.recording_adapter import private
from tests.fakes.telegram_api import FakeTelegram

TOKEN = "654321:SECRET-bot-token_abcdefghijklmnop"
API_KEY = "sk-ant-SECRET-api-key-0123456789"
WEBHOOK_SECRET = "SECRET-webhook-env-0123456789"
TOML_SECRET = "SECRET-webhook-toml-9876543210"
TOML_CANARY = "TOML-CANARY-4d1f"
DB_CANARY = "DB-CANARY-7e2a"
LOG_CANARY = "LOG-CANARY-b91c"
SECRETS = (TOKEN, API_KEY, WEBHOOK_SECRET, TOML_SECRET, TOML_CANARY, DB_CANARY, LOG_CANARY,
           "SECRET-bot-token", "sk-ant-SECRET")
OWNER = 1
RAN = "ATTACK-FINISHED"


def attack(home: Path, config: Path, db: Path, extra: tuple[Path, ...] = ()) -> str:
    """Every route we know, then a marker proving the command ran to the end."""
    files = " ".join(f'"{p}"' for p in (config, db, Path(f"{db}-wal"), *extra))
    return "; ".join([
        "cat /proc/$PPID/environ", "env", f"cat {files}", f'cat "{home}"/roost.toml',
        "ls /proc", "cat /proc/*/environ", "tr '\\0' ' ' < /proc/1/cmdline", "ps -ef",
        f'ls -la "{home}"', f'grep -r SECRET "{home}" "{config.parent}" "{db.parent}"',
        # Undo the covers: as the sandbox's root, then from a nested namespace of its own.
        f'umount "{home}"; umount -l "{home}"; umount "{config}"; cat "{config}"',
        f"unshare -rm sh -c 'umount -l \"{home}\"; cat \"{config}\" \"{db}\"'",
        "unshare -rpf --mount-proc sh -c 'cat /proc/*/environ'",
        "mkdir -p /tmp/p && mount -t proc proc /tmp/p && cat /tmp/p/*/environ",
        f"echo {RAN}",
    ]) + " 2>&1"


def assert_nothing_leaked(output: str) -> None:
    assert RAN in output, output[-2000:]
    for secret in SECRETS:
        assert secret not in output, f"{secret!r} leaked:\n{output}"


def tool_result_text(fake: FakeAnthropic, request: int) -> str:
    content = user_blocks(fake.requests[request].json)
    (result,) = [b for b in content if b["type"] == "tool_result"]
    body = result["content"]
    return body if isinstance(body, str) else json.dumps(body)


async def test_exec_in_roost_run_reads_no_secret_by_any_route(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "roost.toml").write_text(
        f'# {TOML_CANARY}\n[telegram]\nwebhook_secret = "{TOML_SECRET}"\n'
    )
    command = attack(home, home / "roost.toml", home / "roost.db")
    with FakeTelegram(token=TOKEN) as tg, FakeAnthropic() as llm:
        tg.add_chat(OWNER, type="private", first_name="Olivia")
        llm.script(reply_tools(ToolUse("exec", {"command": command})), reply_text("All done."))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ROOST_", "TELEGRAM_", "ANTHROPIC_"))}
        env.update({
            "ROOST_HOME": str(home), "ROOST_OWNERS": f'["telegram:{OWNER}"]',
            "TELEGRAM_BOT_TOKEN": TOKEN, "ROOST_TELEGRAM__BASE_URL": tg.base_url,
            "ROOST_TELEGRAM__WEBHOOK_SECRET": WEBHOOK_SECRET,
            "ANTHROPIC_API_KEY": API_KEY, "ANTHROPIC_BASE_URL": llm.base_url,
            "ROOST_AGENT__MODEL": "claude-test", "ROOST_AGENT__MAX_RETRIES": "0", "PYTHONUNBUFFERED": "1",
        })
        proc = subprocess.Popen([sys.executable, "-m", "bot.cli", "run"], env=env, cwd=Path(__file__).parent.parent,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            tg.send_private(OWNER, f"run the check {DB_CANARY}", first_name="Olivia")
            card = await tg.await_for(
                lambda: next((m for m in tg.bot_messages(OWNER) if (m.text or "").startswith("🔐")), None), 30
            )
            data = {b["text"]: b["callback_data"] for row in card.reply_markup["inline_keyboard"] for b in row}
            tg.press_button(OWNER, card.message_id, OWNER, data["✅ Approve once"], first_name="Olivia")
            await tg.await_for(lambda: any("All done." in (m.text or "") for m in tg.bot_messages(OWNER)), 30)
        finally:
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=30)
    result = tool_result_text(llm, 1)
    assert_nothing_leaked(result)
    assert DB_CANARY in json.dumps(llm.requests[0].json)  # the canary is real: it is in the database
    for secret in (TOKEN, API_KEY, WEBHOOK_SECRET):
        assert secret not in out + err


@pytest.mark.parametrize("layout", ["home", "spread"])
async def test_exec_in_the_app_reads_no_secret_wherever_the_files_are(
    tmp_path: Path, fake_api: FakeAnthropic, monkeypatch: pytest.MonkeyPatch, layout: str
) -> None:
    """The config file, the database and a log file outside ROOST_HOME, the workspace
    outside it or inside it, and a secrets file the owner listed in ROOST_AGENT__EXEC_HIDE."""
    home = tmp_path / "home"
    overrides: dict[str, Any] = {}
    if layout == "spread":
        config = tmp_path / "etc" / "roost.toml"
        db = tmp_path / "data" / "roost.db"
        db.parent.mkdir()
        overrides.update(workspace=tmp_path / "ws", database_url=f"sqlite+aiosqlite:///{db}")
        monkeypatch.setenv("ROOST_CONFIG", str(config))
    else:
        config, db = home / "roost.toml", home / "roost.db"
        monkeypatch.setenv("ROOST_HOME", str(home))
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f'# {TOML_CANARY}\n[telegram]\nwebhook_secret = "{TOML_SECRET}"\n')
    env_file = tmp_path / "secrets.env"
    env_file.write_text(f"TELEGRAM_BOT_TOKEN={TOKEN}\n")
    overrides["agent"] = {"exec_hide": [str(env_file)]}
    log_file = tmp_path / "logs" / "roost.log"
    log_file.parent.mkdir()
    import logging

    handler = logging.FileHandler(log_file)
    logging.getLogger().addHandler(handler)
    try:
        handler.stream.write(f"{LOG_CANARY}\n")
        handler.flush()
        command = attack(home, config, db, extra=(env_file, log_file))
        fake_api.script(reply_tools(ToolUse("exec", {"command": command})), reply_text("done"))
        async with running_app(tmp_path, fake_api, **overrides) as (app, adapter):
            await adapter.say(private(OWNER_ID, f"check {DB_CANARY}"))

            def asked() -> ApprovalRequested | None:
                return next((e for r in adapter.replies for e in r.events if isinstance(e, ApprovalRequested)), None)

            await adapter.wait_for(asked)
            event = asked()
            assert event is not None
            await app.gate.resolve(event.approval_id, Decision.ONCE, f"telegram:{OWNER_ID}")
            await adapter.wait_for(lambda: len(adapter.closed_replies()) == 1, timeout=30)
    finally:
        logging.getLogger().removeHandler(handler)
        handler.close()
    assert_nothing_leaked(tool_result_text(fake_api, 1))
    assert LOG_CANARY in log_file.read_text() and TOKEN in env_file.read_text()
