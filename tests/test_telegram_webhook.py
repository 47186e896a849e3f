"""Webhook mode end to end: setWebhook with the secret, updates POSTed by the fake to the
adapter's own server at the path of WEBHOOK_URL, and a wrong secret refused with 403."""

from __future__ import annotations

import pytest

from adapters.telegram import TelegramAdapter, TelegramConfigError
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.telegram_api import FakeTelegram
from tests.telegram_harness import OWNER, free_port, running, tg  # noqa: F401  (fixture)

SECRET = "s3cret-Token_42-long-enough"


def forged_update(text: str) -> dict:
    chat = {"id": OWNER, "type": "private", "first_name": "Olivia"}
    user = {"id": OWNER, "is_bot": False, "first_name": "Olivia"}
    return {"update_id": 555_555, "message": {"message_id": 4242, "date": 1_700_000_000,
                                               "chat": chat, "from": user, "text": text}}


async def test_webhook_mode_answers_and_refuses_a_wrong_secret(
    tmp_path, tg: FakeTelegram, fake_api: FakeAnthropic
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/tg/hook"
    telegram = {"mode": "webhook", "webhook_url": url, "webhook_listen": f"127.0.0.1:{port}",
                "webhook_secret": SECRET}
    async with running(tmp_path, tg, fake_api, paced=False, telegram=telegram) as h:
        assert tg.webhook.url == url and tg.webhook.secret_token == SECRET
        tg.send_private(OWNER, "hello over the webhook")
        await h.says(OWNER, "echo: hello over the webhook")
        assert tg.webhook_responses[-1].status == 200

        assert await tg.apost_to_webhook(forged_update("forged with a wrong secret"), secret="wrong") == 403
        assert await tg.apost_to_webhook(forged_update("forged without a secret"), secret=None) == 403
        assert await tg.apost_to_webhook(forged_update("wrong path"), url=f"http://127.0.0.1:{port}/other") == 404

        tg.send_private(OWNER, "and again")  # processed after anything that had got in
        await h.says(OWNER, "echo: and again")
        assert [m.text for m in tg.bot_messages(OWNER)] == ["echo: hello over the webhook", "echo: and again"]
        assert not any("forged" in r.body.decode() or "wrong path" in r.body.decode() for r in fake_api.requests)
        assert not tg.calls_of("getUpdates")


@pytest.mark.parametrize(
    ("settings", "complaint"),
    [
        ({"webhook_url": None, "webhook_secret": SECRET}, "WEBHOOK_URL"),
        ({"webhook_url": "https://example.com/hook", "webhook_secret": None}, "WEBHOOK_SECRET"),
        ({"webhook_url": "https://example.com/hook", "webhook_secret": "has spaces"}, "WEBHOOK_SECRET"),
        ({"webhook_url": "https://example.com/hook", "webhook_secret": SECRET, "webhook_listen": "8443"}, "host:port"),
    ],
)
def test_webhook_mode_refuses_settings_that_cannot_work_safely(settings: dict, complaint: str) -> None:
    with pytest.raises(TelegramConfigError, match=complaint):
        TelegramAdapter("1:A", mode="webhook", **settings)
