"""A local web UI over a running game, for operators and modders (``moonbox[dashboard]``).

:class:`Dashboard` serves the page and a JSON API on 127.0.0.1 (anything else needs a
token) while the host ticks the game: after each tick the game thread calls
:meth:`Dashboard.after_tick`, which publishes a summary as plain data and does the actions
the page queued (lift a quarantine, reload a mod, roll back or reset a version). The web
side reads only what was published and the versions store; it never touches the game or a
Lua runtime. ``moonbox dev DIR --dashboard`` uses it. See ``docs/dashboard.md``.

Importing this package needs nothing beyond moonbox; :meth:`Dashboard.start` needs the
``dashboard`` extra (Starlette, uvicorn, sse-starlette).
"""

from ._access import MIN_TOKEN_CHARS, Access, is_loopback
from ._actions import ACTIONS, ActionError, VersionHook
from ._dashboard import DEFAULT_HOST, DEFAULT_PORT, INSTALL_HINT, Dashboard
from ._recorder import LOG_KINDS, Published, ShardSource, Sources

__all__ = [
    "ACTIONS",
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "INSTALL_HINT",
    "LOG_KINDS",
    "MIN_TOKEN_CHARS",
    "Access",
    "ActionError",
    "Dashboard",
    "Published",
    "ShardSource",
    "Sources",
    "VersionHook",
    "is_loopback",
]
