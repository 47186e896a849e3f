"""Secrets never reach the logs."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

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


def test_redaction_catches_token_shapes_and_url_passwords_it_was_not_told() -> None:
    redact = RedactSecrets([]).redact
    assert redact("The token `123456:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw` was rejected") == (
        "The token `[REDACTED]` was rejected")
    assert redact("cannot connect to postgresql+asyncpg://roost:hunter2@db:5432/x") == (
        "cannot connect to postgresql+asyncpg://roost:[REDACTED]@db:5432/x")
    assert redact("at 12:34 on https://example.org/a:b") == "at 12:34 on https://example.org/a:b"


EXIT_PATHS = """
import threading, warnings, logging
from bot.logs import RedactSecrets, guard_output, setup_logging
TOKEN = "123456:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"
guard_output(setup_logging("INFO", ["sk-ant-exit-path-key-9876"]))
warnings.warn(f"careful with sk-ant-exit-path-key-9876")
thread = threading.Thread(target=lambda: (_ for _ in ()).throw(ValueError(f"thread saw {TOKEN}")))
thread.start(); thread.join()
print("stdout has sk-ant-exit-path-key-9876 too")
raise RuntimeError(f"The token `{TOKEN}` was rejected; key sk-ant-exit-path-key-9876")
"""


def test_every_exit_path_is_redacted() -> None:
    """Uncaught exceptions (Python prints the traceback itself), a crashed thread, a warning
    and plain prints: none bypasses redaction."""
    result = subprocess.run([sys.executable, "-c", EXIT_PATHS], capture_output=True, text=True, timeout=30,
                            cwd=Path(__file__).parent.parent)
    assert result.returncode == 1
    output = result.stdout + result.stderr
    assert "AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw" not in output and "sk-ant-exit-path-key" not in output
    assert "RuntimeError: The token `[REDACTED]` was rejected; key [REDACTED]" in result.stderr
    assert "ValueError: thread saw [REDACTED]" in result.stderr
    assert "careful with [REDACTED]" in result.stderr
    assert "stdout has [REDACTED] too" in result.stdout
