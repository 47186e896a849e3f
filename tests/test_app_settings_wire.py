"""Settings reach the agent loop through the whole application (environment → Settings →
bot.app.build → LoopConfig), and no configured secret ever reaches a model request."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_core.events import RunFinished
from bot.app import build
from bot.settings import load_settings
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import ToolUse, reply_text, reply_tools
from tests.fakes.recording_adapter import RecordingAdapter, group, private

OWNER = "1"
API_KEY = "sk-ant-SECRET-api-key-9f8e7d6c5b4a"
BOT_TOKEN = "123456:SECRET-bot-token-abcdefghijklmno"
DISCORD_TOKEN = "SECRET-discord-token.abcdefghijklmnop"
WEBHOOK_SECRET = "SECRET-webhook-secret-0123456789"


def configure(monkeypatch: pytest.MonkeyPatch, home: Path, fake: FakeAnthropic, **env: str) -> None:
    """Configure Roost the way a user does: through the environment only."""
    monkeypatch.delenv("ROOST_CONFIG", raising=False)
    values = {
        "ROOST_HOME": str(home),
        "ROOST_OWNERS": f'["telegram:{OWNER}"]',
        "ROOST_AGENT__MODEL": "claude-test",
        "ROOST_AGENT__MAX_RETRIES": "0",
        "ROOST_TELEGRAM__ALLOWED_GROUPS": '["*"]',
        "ANTHROPIC_API_KEY": API_KEY,
        "ANTHROPIC_BASE_URL": fake.base_url,
        **env,
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)


async def test_max_turns_from_the_environment_stops_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeAnthropic() as fake:
        configure(monkeypatch, tmp_path / "home", fake, ROOST_AGENT__MAX_TURNS="2")
        # A model that never stops asking for tools (different inputs: not a loop).
        fake.responder = lambda body: reply_tools(ToolUse("read_file", {"path": f"SOUL.md#{len(body['messages'])}"}))
        adapter = RecordingAdapter("telegram")
        async with build(load_settings(), [adapter]) as app:
            await adapter.start(app.conversations)
            await adapter.say(private(OWNER, "keep going"))
            await adapter.wait_for(lambda: len(adapter.closed_replies()) == 1)
        outcome = adapter.replies[0].outcome
        assert isinstance(outcome, RunFinished), outcome
        assert outcome.stop_reason == "max_turns" and outcome.turns == 2
        assert "Stopped after 2 steps" in outcome.text
        assert len(fake.requests) == 2 and all(r.status == 200 for r in fake.requests)


async def test_no_configured_secret_appears_in_any_model_request(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeAnthropic() as fake:
        configure(
            monkeypatch, tmp_path / "home", fake,
            TELEGRAM_BOT_TOKEN=BOT_TOKEN, DISCORD_BOT_TOKEN=DISCORD_TOKEN,
            ROOST_TELEGRAM__WEBHOOK_SECRET=WEBHOOK_SECRET,
        )  # fmt: skip
        fake.script(
            reply_tools(ToolUse("read_file", {"path": "AGENTS.md"}), text="Let me look."),
            reply_text("Done reading."),
        )
        adapter = RecordingAdapter("telegram")
        settings = load_settings()
        assert set(settings.secrets) == {API_KEY, BOT_TOKEN, DISCORD_TOKEN, WEBHOOK_SECRET}
        async with build(settings, [adapter]) as app:
            await adapter.start(app.conversations)
            await adapter.say(private(OWNER, "what is configured here? read your files"))
            await adapter.wait_for(lambda: len(adapter.closed_replies()) == 1)
            await adapter.say(group("-100", "42", "@roost hello group"))
            await adapter.wait_for(lambda: len(adapter.closed_replies()) == 2)
            await adapter.say(private(OWNER, "and once more"))
            await adapter.wait_for(lambda: len(adapter.closed_replies()) == 3)
        assert len(fake.requests) == 4 and all(r.status == 200 for r in fake.requests)
        for request in fake.requests:
            body = request.body.decode()
            for secret in (API_KEY, BOT_TOKEN, DISCORD_TOKEN, WEBHOOK_SECRET, "SECRET-"):
                assert secret not in body, f"{secret!r} reached a model request"
        # The key does travel, where it must: in the credential header only.
        assert fake.requests[0].headers.get("authorization") == f"Bearer {API_KEY}"
