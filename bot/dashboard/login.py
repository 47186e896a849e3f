"""Login: a token link, then a signed cookie.

The token lives in `ROOST_HOME/dashboard.token` (mode 0600): `roost dashboard url` prints the
link, `roost dashboard rotate` replaces it. The cookie is signed with a key derived from the
token, so rotating also ends every session logged in with the old one — in a running
`roost run` too (the file is read again when it changes). The cookie carries the CSRF value
that every state-changing request must echo."""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from itsdangerous import BadSignature, URLSafeTimedSerializer

FILE_NAME = "dashboard.token"
COOKIE = "roost_dashboard"
MAX_AGE_S = 7 * 24 * 3600


def token_path(home: Path) -> Path:
    return home / FILE_NAME


def rotate(home: Path) -> str:
    """Write a new token (the old link and every cookie stop working); return it."""
    home.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    path = token_path(home)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(token + "\n")
    os.replace(tmp, path)
    return token


def current(home: Path) -> str:
    """The token, created on first use."""
    try:
        token = token_path(home).read_text().strip()
    except FileNotFoundError:
        token = ""
    return token or rotate(home)


def login_url(host: str, port: int, token: str) -> str:
    shown = f"[{host}]" if ":" in host else host
    if host in ("0.0.0.0", "::"):
        shown = "127.0.0.1"
    return f"http://{shown}:{port}/login?token={token}"


@dataclass(frozen=True, slots=True)
class Session:
    csrf: str


class Keys:
    """The token as the running dashboard knows it, re-read when the file changes."""

    def __init__(self, home: Path) -> None:
        self._home = home
        self._stamp: tuple[int, int] | None = None
        self._token = ""
        self._serializer: URLSafeTimedSerializer | None = None
        self.refresh()

    def refresh(self) -> None:
        path = token_path(self._home)
        try:
            st = path.stat()
            stamp = (st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            stamp = None
        if stamp is not None and stamp == self._stamp:
            return
        self._token = current(self._home)
        st = path.stat()
        self._stamp = (st.st_mtime_ns, st.st_size)
        key = hashlib.sha256(b"roost-dashboard-cookie\0" + self._token.encode()).hexdigest()
        self._serializer = URLSafeTimedSerializer(key, salt="roost-dashboard")

    def token_ok(self, offered: str) -> bool:
        self.refresh()
        return bool(offered) and hmac.compare_digest(offered.encode(), self._token.encode())

    def new_cookie(self) -> tuple[str, Session]:
        self.refresh()
        session = Session(secrets.token_urlsafe(24))
        assert self._serializer is not None
        return self._serializer.dumps({"c": session.csrf}), session

    def session(self, cookie: str | None) -> Session | None:
        """The session a cookie proves, or None (missing, forged, expired, or rotated away)."""
        if not cookie:
            return None
        self.refresh()
        assert self._serializer is not None
        try:
            data = self._serializer.loads(cookie, max_age=MAX_AGE_S)
        except BadSignature:
            return None
        csrf = data.get("c") if isinstance(data, dict) else None
        return Session(csrf) if isinstance(csrf, str) and csrf else None
