"""The dashboard's own login: a token in a file the lab keeps (never the broker's password),
exchanged once for a session cookie (HttpOnly, SameSite=Strict) the browser sends back."""

from __future__ import annotations

import hmac
import secrets
from pathlib import Path

from rig.errors import ConfigError

COOKIE = "rig_dashboard_session"
#: Shortest token accepted: a guessable one would make the login a formality.
MIN_TOKEN_CHARS = 16
#: Sessions kept at once (the oldest goes first).
MAX_SESSIONS = 1000


def read_token(path: Path) -> str:
    """The token on the file's first line, or a ConfigError saying what is wrong."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigError(f"--token-file: cannot read {path}: {exc.strerror or exc}",
                          hint="give a readable file holding the dashboard's login token "
                          "on its first line") from None
    token = lines[0].strip() if lines else ""
    if len(token) < MIN_TOKEN_CHARS:
        raise ConfigError(f"--token-file: {path}: the token is shorter than "
                          f"{MIN_TOKEN_CHARS} characters",
                          hint="make one with: python -c 'import secrets; "
                          "print(secrets.token_urlsafe(24))' > FILE")
    return token


class Login:
    """Checks the token and keeps the sessions it opened."""

    def __init__(self, token: str | None) -> None:
        self._token = token
        self._sessions: dict[str, None] = {}

    @property
    def required(self) -> bool:
        return self._token is not None

    def open(self, token: str) -> str | None:
        """A new session id if `token` is right, else None."""
        if self._token is None or not hmac.compare_digest(token.encode(), self._token.encode()):
            return None
        session = secrets.token_urlsafe(32)
        self._sessions[session] = None
        while len(self._sessions) > MAX_SESSIONS:
            self._sessions.pop(next(iter(self._sessions)))
        return session

    def valid(self, session: str | None) -> bool:
        """Whether a request with this session cookie is logged in (always, without a token)."""
        if self._token is None:
            return True
        return session is not None and session in self._sessions

    def close(self, session: str | None) -> None:
        self._sessions.pop(session or "", None)
