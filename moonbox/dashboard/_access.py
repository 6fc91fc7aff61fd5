"""Who may reach the dashboard: loopback by default, anything else only with a token."""

from __future__ import annotations

import hmac
import ipaddress

from .._errors import ConfigError

__all__ = ["MIN_TOKEN_CHARS", "Access", "is_loopback"]

MIN_TOKEN_CHARS = 16
"""The shortest token accepted: a dashboard can lift quarantines and roll back scripts."""

_LOOPBACK_NAMES = ("localhost",)


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only: ``localhost`` or a loopback address
    (``127.0.0.0/8``, ``::1``)."""
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class Access:
    """The rule of one dashboard: the address it listens on and the token, checked when
    made.

    Without a token the dashboard listens on a loopback address only, and answers only
    requests whose ``Host`` header names a loopback address (a web page elsewhere cannot
    reach it through a name that resolves to 127.0.0.1). With a token every ``/api/``
    request must carry it, as ``Authorization: Bearer <token>`` or ``?token=<token>``
    (the event stream cannot set a header).

    Raises:
        ConfigError: a non-loopback address without a token, or a token shorter than
            :data:`MIN_TOKEN_CHARS` characters or holding whitespace or control characters.
    """

    def __init__(self, host: str, token: str | None) -> None:
        if not isinstance(host, str) or not host:
            raise ConfigError("host must be an address, e.g. 127.0.0.1")
        if token is not None:
            if not isinstance(token, str) or len(token) < MIN_TOKEN_CHARS \
                    or any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in token):
                raise ConfigError(f"a dashboard token is at least {MIN_TOKEN_CHARS} printable "
                                  "characters without spaces, e.g. from "
                                  "python -c 'import secrets; print(secrets.token_urlsafe())'")
        elif not is_loopback(host):
            raise ConfigError(f"the dashboard listens on a loopback address (127.0.0.1, ::1, "
                              f"localhost) unless a token is given; {host!r} is not one: "
                              "give a token, or listen on 127.0.0.1")
        self.host = host
        self.token = token

    def allows(self, host_header: str | None, authorization: str | None,
               query_token: str | None) -> bool:
        """Whether a request with these headers may read or act."""
        if self.token is None:
            return host_header is not None and is_loopback(_host_name(host_header))
        offered = None
        if authorization is not None and authorization[:7].lower() == "bearer ":
            offered = authorization[7:].strip()
        elif query_token is not None:
            offered = query_token
        return offered is not None and hmac.compare_digest(offered.encode(), self.token.encode())


def _host_name(host_header: str) -> str:
    """The host of a ``Host`` header, without its port: ``[::1]:80`` -> ``::1``."""
    if host_header.startswith("["):
        return host_header[1:host_header.find("]")] if "]" in host_header else host_header
    return host_header.rsplit(":", 1)[0] if host_header.count(":") == 1 else host_header
