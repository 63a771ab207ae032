"""The local token of a rebuno daemon run with no API keys, found with no set-up.

A kernel without ``api_keys`` and ``rebuno sandboxd`` make a random token at every start
and answer ``401`` to any call without it. They write it (mode 0600, so only the user who
started them can read it) to ``<state_dir>/local-token`` and register it for their address
in ``${XDG_CONFIG_HOME:-$HOME/.config}/rebuno/local/<host>_<port>``; both files hold
``{"service", "url", "token", "pid"}``. A client given no key looks in the registry entry
of its URL's host and port, then in the state file relative to the working folder (the
kernel's ``${REBUNO_STATE_DIR:-.rebuno}/local-token``, sandboxd's
``${REBUNO_STATE_DIR:-.rebuno}/sandboxes/local-token``), and uses an entry only when its
``url`` names the same address, so a token never goes to another server than its own.
The same rules as the C CLI (``src/net/local_auth.c``).
"""

from __future__ import annotations

import json
import os
import pwd
import stat
import urllib.parse

TOKEN_FILE = "local-token"
KERNEL_STATE_FILE = TOKEN_FILE
SANDBOXD_STATE_FILE = os.path.join("sandboxes", TOKEN_FILE)
_ENTRY_MAX = 4096
_HEX = frozenset("0123456789abcdef")


def _addr_key(host: str | None, port: int | None) -> str | None:
    """``host_port`` (lower case, IPv6 without brackets, localhost as 127.0.0.1)."""
    if not host or not port or not 0 < port < 65536:
        return None
    h = host.strip("[]").lower()
    if not h or len(h) > 64 or any(not (c.isascii() and (c.isalnum() or c in ".:-")) for c in h):
        return None
    return f"{'127.0.0.1' if h == 'localhost' else h}_{port}"


def _url_key(url: str) -> str | None:
    try:
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or u.username is not None:
            return None
        return _addr_key(u.hostname, u.port or (443 if u.scheme == "https" else 80))
    except ValueError:
        return None


def registry_dir() -> str | None:
    """``${XDG_CONFIG_HOME:-$HOME/.config}/rebuno/local`` (``None`` without a home)."""
    base = os.environ.get("XDG_CONFIG_HOME", "")
    if not base.startswith("/"):
        home = os.environ.get("HOME", "")
        if not home.startswith("/"):
            try:
                home = pwd.getpwuid(os.geteuid()).pw_dir
            except KeyError:
                return None
        if not home.startswith("/"):
            return None
        base = os.path.join(home, ".config")
    return os.path.join(base, "rebuno", "local")


def _read_entry(path: str, key: str) -> str | None:
    """The token in the entry at ``path`` if it was made for ``key``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size >= _ENTRY_MAX:
            return None
        entry = json.loads(os.read(fd, _ENTRY_MAX))
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    if not isinstance(entry, dict):
        return None
    url, token = entry.get("url"), entry.get("token")
    if not isinstance(url, str) or not isinstance(token, str) or _url_key(url) != key:
        return None
    return token if len(token) == 64 and set(token) <= _HEX else None


def find(url: str, state_file: str | None) -> tuple[str | None, str, list[str]]:
    """``(token, the file it came from, the files looked at)`` for the daemon at ``url``;
    ``state_file`` is relative to ``$REBUNO_STATE_DIR`` (default ``.rebuno``)."""
    key = _url_key(url)
    looked: list[str] = []
    if key is None:
        return None, "", looked
    places = []
    reg = registry_dir()
    if reg:
        places.append(os.path.join(reg, key))
    if state_file:
        places.append(os.path.join(os.environ.get("REBUNO_STATE_DIR") or ".rebuno", state_file))
    for p in places:
        looked.append(p)
        token = _read_entry(p, key)
        if token:
            return token, p, looked
    return None, "", looked


class LocalToken:
    """The token a client sends when it was given no key: looked up on first use, and
    again after a ``401`` (the daemon restarted with a new one)."""

    def __init__(self, url: str, state_file: str | None):
        self.url = url
        self.state_file = state_file
        self._token: str | None = None
        self._looked_up = False
        self.source = ""
        self.looked: list[str] = []

    def get(self) -> str | None:
        """The token, or ``None`` when none was found."""
        if not self._looked_up:
            self.refresh()
        return self._token

    def refresh(self) -> bool:
        """Look again; ``True`` when a token other than the one sent so far was found."""
        old = self._token
        self._looked_up = True
        self._token, self.source, self.looked = find(self.url, self.state_file)
        return self._token is not None and self._token != old

    def hint(self) -> str:
        """Where the token came from, or where it was looked for, for error messages."""
        if self._token:
            return f"the local token of {self.source}"
        where = " or ".join(self.looked) or "the registry"
        return f"no local token for {self.url} in {where} (run as the user who started it)"
