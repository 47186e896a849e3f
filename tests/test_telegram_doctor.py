"""`roost doctor` asks Telegram (getMe over PTB, against the fake Bot API) whether privacy
mode hides group messages from the bot: group context needs it off."""

from __future__ import annotations

from pathlib import Path

from bot.doctor import Check, run_checks
from bot.settings import Settings
from tests.fakes.telegram_api import FakeTelegram
from tests.telegram_harness import TOKEN, tg  # noqa: F401  (fixture)


async def privacy_check(tmp_path: Path, tg: FakeTelegram) -> Check:
    settings = Settings(home=tmp_path / "home", telegram_bot_token=TOKEN, telegram={"base_url": tg.base_url})
    (check,) = [c for c in await run_checks(settings) if c.name == "telegram privacy"]
    return check


async def test_doctor_warns_that_privacy_mode_hides_group_context(tmp_path: Path, tg: FakeTelegram) -> None:
    check = await privacy_check(tmp_path, tg)
    assert check.status == "warn" and "privacy mode ON" in check.detail
    assert "last 50 messages" in check.detail and "/setprivacy" in check.fix and "Disable" in check.fix
    assert tg.calls_of("getMe")


async def test_doctor_is_content_when_the_bot_reads_all_group_messages(tmp_path: Path, tg: FakeTelegram) -> None:
    tg.set_privacy_mode(False)
    check = await privacy_check(tmp_path, tg)
    assert check.status == "ok" and "reads all group messages" in check.detail


async def test_doctor_reports_a_token_telegram_refuses_without_showing_it(tmp_path: Path, tg: FakeTelegram) -> None:
    settings = Settings(home=tmp_path / "home", telegram_bot_token="999:WRONG-secret", telegram={"base_url": tg.base_url})
    (check,) = [c for c in await run_checks(settings) if c.name == "telegram privacy"]
    assert check.status == "warn" and "rejected the bot token" in check.detail
    assert "WRONG-secret" not in check.detail + check.fix
