"""Logging set-up: one line per event, secrets redacted before anything is written.

Two layers: a filter on the log handler (records, their tracebacks), and `guard_output`,
which redacts everything written to stdout and stderr — tracebacks Python prints itself
(uncaught exceptions, thread crashes, unraisable errors), warnings, and libraries that
print. A secret is redacted if Roost knows it, and any Bot API token shape or URL password
is redacted even when it does not.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TextIO

REDACTED = "[REDACTED]"

_LEARNED: list[str] = []
"""Secrets learned while running (an `[mcp]` server's `${VAR}` values after a hot reload):
every redactor of the process redacts them too, longest first."""


def learn_secrets(values: Iterable[str]) -> None:
    """Add secrets every `RedactSecrets` (logs, stdout/stderr, the audit trail) redacts."""
    global _LEARNED
    _LEARNED = sorted({*_LEARNED, *(v for v in values if len(v) >= 4)}, key=len, reverse=True)
# Bot API URLs carry the token in the path; catch them even when we were not told the token.
_TOKEN_IN_URL = re.compile(r"(/bot)\d+:[A-Za-z0-9_-]{20,}")
# A Telegram bot token anywhere (python-telegram-bot quotes it in InvalidToken messages).
_BOT_TOKEN = re.compile(r"\b\d{5,}:[A-Za-z0-9_-]{30,}")
# scheme://user:password@host — a database URL in a driver's error message.
_URL_PASSWORD = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^:/@\s]*:)[^@\s/]+@", re.IGNORECASE)


class RedactSecrets(logging.Filter):
    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        self._secrets = sorted({s for s in secrets if len(s) >= 4}, key=len, reverse=True)

    def redact(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, REDACTED)
        for secret in _LEARNED:
            text = text.replace(secret, REDACTED)
        text = _TOKEN_IN_URL.sub(rf"\1{REDACTED}", text)
        text = _BOT_TOKEN.sub(REDACTED, text)
        return _URL_PASSWORD.sub(rf"\1{REDACTED}@", text)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = self.redact(message)
        if record.exc_info:
            formatted = logging.Formatter().formatException(record.exc_info)
            record.exc_text = self.redact(formatted)
        if record.stack_info:
            record.stack_info = self.redact(record.stack_info)
        if redacted != message or record.args:
            record.msg, record.args = redacted, None
        return True


class RedactingStream:
    """A text stream that redacts every write before passing it on. Attributes it does not
    define (encoding, isatty, fileno, buffer, ...) are the wrapped stream's."""

    def __init__(self, inner: TextIO, redact: Callable[[str], str]) -> None:
        self._inner = inner
        self._redact = redact

    @property
    def wrapped(self) -> TextIO:
        return self._inner

    def write(self, text: str) -> int:
        self._inner.write(self._redact(text))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        self._inner.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def guard_output(redactor: RedactSecrets) -> None:
    """Route every exit path through redaction: stdout and stderr are wrapped (so the
    tracebacks Python prints for uncaught exceptions, in threads and for unraisable
    errors pass through it), and warnings become log records."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if isinstance(stream, RedactingStream):
            stream = stream.wrapped
        setattr(sys, name, RedactingStream(stream, redactor.redact))
    logging.captureWarnings(True)


def setup_logging(level: str, secrets: Iterable[str]) -> RedactSecrets:
    redactor = RedactSecrets(secrets)
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(redactor)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # httpx logs every request URL at INFO, and Bot API URLs contain the token.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpx2").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    return redactor


def log_files() -> list[Path]:
    """Files the root logger writes to (commands run by `exec` must not read them)."""
    return [
        Path(h.baseFilename)
        for h in logging.getLogger().handlers
        if isinstance(h, logging.FileHandler)
    ]
