"""Scrubbing text that leaves the runner: secrets out of audit rows, machine paths out of
error results (which may be shown in a group)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

_SECRET_NAME = r"\b[A-Za-z0-9_]*(?:TOKEN|SECRET|PASSW(?:OR)?D?|API_?KEY|PRIVATE_?KEY|CREDENTIALS?|DATABASE_URL)[A-Za-z0-9_]*"
_ASSIGNMENT = re.compile(
    rf"""(?ix)
    (?P<name>"?{_SECRET_NAME}"?)        # NAME, "NAME" (a JSON key) or --name
    (?P<sep>\s*[=:]\s*)
    (?P<value>"(?:[^"\\]|\\.)*"|'[^']*'|[^\s"',;&|]+)
    """
)
_BEARER = re.compile(r"(?i)\b(authorization\s*[:=]\s*(?:bearer|basic|token)\s+)[^\s\"']+")
_URL_PASSWORD = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^/\s:@]+:)[^@\s/]+@")
_REDACTED = "***"


def redact_secrets(text: str) -> str:
    """`text` with the values of env-like secrets (`API_KEY=…`, `"db_password": "…"`),
    bearer tokens and URL passwords replaced by ***. Names stay, so the row still says
    what was done."""
    text = _ASSIGNMENT.sub(_keep_quotes, text)
    text = _BEARER.sub(rf"\1{_REDACTED}", text)
    return _URL_PASSWORD.sub(rf"\1{_REDACTED}@", text)


_SECRET_KEY = re.compile(rf"^{_SECRET_NAME}$", re.IGNORECASE)


def redact_json(value: Any) -> Any:
    """A JSON-like value with secret-named keys' values replaced and every string passed
    through `redact_secrets` (so a command or an embedded JSON text is covered too)."""
    if isinstance(value, str):
        return redact_secrets(value)
    if isinstance(value, list):
        return [redact_json(v) for v in value]
    if isinstance(value, dict):
        return {
            k: _REDACTED if isinstance(k, str) and _SECRET_KEY.match(k) and v not in (None, "") else redact_json(v)
            for k, v in value.items()
        }
    return value


def _keep_quotes(match: re.Match[str]) -> str:
    value = match.group("value")
    quote = value[0] if value[:1] in ("'", '"') else ""
    return f"{match.group('name')}{match.group('sep')}{quote}{_REDACTED}{quote}"


def relative_paths(text: str, workspace: Path) -> str:
    """`text` with the workspace's absolute path (as given and as resolved) replaced by
    workspace-relative paths: `/home/me/.roost/workspace/notes/a.md` → `notes/a.md`."""
    roots = {str(workspace)}
    try:
        roots.add(str(workspace.resolve()))
    except OSError:
        pass
    for root in sorted((r.rstrip("/") for r in roots if r not in ("", "/")), key=len, reverse=True):
        if root in text:
            text = text.replace(root + "/", "").replace(root, ".")
    return text
