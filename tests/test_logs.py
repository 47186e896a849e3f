"""Secrets never reach the logs."""

from __future__ import annotations

import logging

from bot.logs import RedactSecrets, setup_logging


def test_known_secrets_and_bot_urls_are_redacted(capsys) -> None:
    token = "123456:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"
    setup_logging("INFO", ["sk-ant-secret-value-1234", token])
    log = logging.getLogger("roost.test")
    log.info("calling https://api.telegram.org/bot%s/getMe with key %s", token, "sk-ant-secret-value-1234")
    log.info("another bot url https://x/bot987654:ZZZZZZZZZZZZZZZZZZZZZZZZZZZZZ/sendMessage")
    try:
        raise RuntimeError(f"failed with {token}")
    except RuntimeError:
        log.exception("boom")
    err = capsys.readouterr().err
    assert token not in err and "sk-ant-secret-value-1234" not in err
    assert "987654:ZZZZ" not in err
    assert err.count("[REDACTED]") >= 4


def test_redaction_keeps_ordinary_text() -> None:
    assert RedactSecrets(["abcd1234"]).redact("nothing secret here") == "nothing secret here"
