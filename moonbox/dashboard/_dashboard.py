"""A local web UI over a running game: the one object a host makes, starts and feeds."""

from __future__ import annotations

import socket
import sys
import threading
import time
import traceback
from typing import TYPE_CHECKING, Any

from .._errors import ConfigError, HostError
from ._access import Access
from ._actions import Actions, VersionHook
from ._recorder import Published, Recorder, ShardSource, Sources

if TYPE_CHECKING:
    from ..engine import Game, TickReport
    from ..isolation import WorkerPool
    from ..mods import ModHost, ReloadResult
    from ..store import Store

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "INSTALL_HINT", "Dashboard"]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
"""The port of ``moonbox dev --dashboard`` unless ``--port`` says otherwise."""
INSTALL_HINT = "pip install 'moonbox[dashboard]'"
START_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 10.0


class Dashboard:
    """A local web UI over a running :class:`~moonbox.engine.Game`.

    The game thread feeds it: call :meth:`after_tick` after each ``game.tick()`` (or let
    :meth:`tick` do both). There it reads the game, publishes a summary (plain data), and
    does the actions the page asked for (lift a quarantine, reload a mod, roll back or
    reset a version), between two ticks. The web side, on a thread of its own, reads only
    the published summaries and the versions store; it never touches the game or a Lua
    runtime. See ``docs/dashboard.md``.

    Args:
        game: the game to show.
        mods: the :class:`~moonbox.mods.ModHost` that loads its mods from a folder, if any:
            mods that failed to load, reloads, the source lines of errors, and the reload
            action. Its ``on_result`` is chained (and put back by :meth:`close`).
        store: the versions store the game uses (default: the mod host's). Its versions
            panel reads it; rollback and reset change it, then the game: a mod file's key
            (``mods/<id>/<path>``) has the mod host swap in the mod as the store has it.
        pool: the worker pool to show (default: the game's, when isolated).
        shards: a sharded game (``moonbox.cluster.ShardedGame``) whose shards to show as
            the workers are, read between two ticks on the game thread: tick the sharded
            game on the thread that calls :meth:`after_tick`. The other panels show
            ``game`` (the host's own game, or a shard's of the local backend).
        host: the address to listen on: a loopback address unless a ``token`` is given.
        port: the port (0: any free one; :attr:`port` says which).
        token: a secret every ``/api/`` request must carry (``Authorization: Bearer``, or
            ``?token=``); at least 16 characters.
        tick_budget_s: the time one tick may take: the tick-health chart's budget line.
        sources: chunk name -> source text (a mapping or a function), for the source lines
            of errors in chunks the mod host does not know.
        on_version: called on the game thread after a rollback or reset of a key that is
            not a mod host's file: ``on_version(kind, key, revision)``; raising refuses it
            and the store is put back.

    Raises:
        ConfigError: a non-loopback ``host`` without a token, or a short token.
    """

    def __init__(
        self,
        game: Game,
        *,
        mods: ModHost | None = None,
        store: Store | None = None,
        pool: WorkerPool | None = None,
        shards: ShardSource | None = None,
        host: str = DEFAULT_HOST,
        port: int = 0,
        token: str | None = None,
        tick_budget_s: float = 0.05,
        sources: Sources | None = None,
        on_version: VersionHook | None = None,
    ) -> None:
        self.access = Access(host, token)
        if type(port) is not int or not 0 <= port <= 65535:
            raise ConfigError("port must be 0 (any free port) to 65535")
        if not (isinstance(tick_budget_s, (int, float)) and 0 < tick_budget_s < 3600):
            raise ConfigError("tick_budget_s must be a positive number of seconds")
        self.game = game
        self.mods = mods
        self.store = store if store is not None else (mods.store if mods is not None else None)
        self.host = host
        self._port = port
        self.recorder = Recorder(game, mods=mods, store=self.store, pool=pool, shards=shards,
                                 tick_budget_s=float(tick_budget_s), sources=sources)
        self.actions = Actions(game, self.recorder, mods=mods, store=self.store,
                               on_version=on_version)
        self.closing = False
        self.internal_errors = 0
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._previous_on_result: Any = None
        if mods is not None:
            self._previous_on_result = mods.on_result
            mods.on_result = self._on_result

    # -- the host's side -------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The port it listens on (the one picked, once started with port 0)."""
        return self._port

    @property
    def url(self) -> str:
        """The page's address (with ``?token=`` when there is a token)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        query = f"?token={self.access.token}" if self.access.token else ""
        return f"http://{host}:{self._port}/{query}"

    def start(self) -> str:
        """Listen and serve, on a thread of its own; the page's :attr:`url`.

        Raises:
            ConfigError: the dashboard's packages are missing (``moonbox[dashboard]``), or
                the address cannot be listened on (in use, not this machine's).
            HostError: the server did not come up.
        """
        if self._thread is not None:
            return self.url
        try:
            import uvicorn

            from ._app import build_app
        except ImportError as exc:
            raise ConfigError(f"the dashboard needs its packages ({exc.name} is missing): "
                              f"{INSTALL_HINT}") from None
        try:
            info = socket.getaddrinfo(self.host, self._port, type=socket.SOCK_STREAM)[0]
            sock = socket.socket(info[0], socket.SOCK_STREAM)
        except OSError as exc:
            raise ConfigError(f"cannot listen on {self.host}: {exc}") from None
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(info[4])
            sock.listen(64)
        except OSError as exc:
            sock.close()
            raise ConfigError(f"cannot listen on {self.host}:{self._port}: {exc.strerror or exc}; "
                              "choose another port") from None
        self._port = sock.getsockname()[1]
        config = uvicorn.Config(build_app(self), log_level="warning", access_log=False,
                                lifespan="off", timeout_graceful_shutdown=2,
                                ws="none", server_header=False)
        server = uvicorn.Server(config)
        self._server = server
        thread = threading.Thread(target=self._serve, args=(server, sock),
                                  name="moonbox-dashboard", daemon=True)
        self._thread = thread
        thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                self.close()
                raise HostError(f"the dashboard's server did not start on {self.url}")
            time.sleep(0.01)
        return self.url

    @staticmethod
    def _serve(server: Any, sock: socket.socket) -> None:
        try:
            server.run(sockets=[sock])
        finally:
            sock.close()

    def after_tick(self, report: TickReport, *, elapsed_s: float | None = None) -> None:
        """Call on the game thread after each tick, with its report: records it, does the
        actions the page asked for, and publishes a summary (at most five a second, and
        after every action).

        Args:
            report: what ``game.tick()`` returned.
            elapsed_s: how long the tick took; ``None``: the time the mods' calls took
                (what the mods' stats add up to; the world's apply is left out).

        A fault of the dashboard itself never reaches the game loop: it is counted in
        :attr:`internal_errors` and logged (kind ``dashboard``).
        """
        settle: list[Any] = []
        try:
            self.recorder.record(report, elapsed_s)
            settle = self.actions.apply_pending()
            self.recorder.maybe_publish(force=bool(settle))
        except Exception as exc:  # noqa: BLE001 - the game goes on without the dashboard
            self._fault(exc)
        finally:
            for answer in settle:
                answer()

    def publish(self) -> None:
        """Publish a summary now (on the game thread): :meth:`after_tick` publishes at most
        five a second, so a game that stops ticking should call this once it stops."""
        try:
            self.recorder.maybe_publish(force=True)
        except Exception as exc:  # noqa: BLE001 - as after_tick
            self._fault(exc)

    def tick(self) -> TickReport:
        """``game.tick()``, timed, then :meth:`after_tick`; the tick's report."""
        started = time.perf_counter()
        report = self.game.tick()
        self.after_tick(report, elapsed_s=time.perf_counter() - started)
        return report

    def summary(self) -> dict[str, Any]:
        """The latest published summary (what ``GET /api/summary`` answers)."""
        return self.recorder.published.summary

    def published(self) -> Published:
        """The latest publication: summary, world view and error groups (any thread)."""
        return self.recorder.published

    def close(self) -> None:
        """Stop serving (open event streams end), fail the actions still waiting, and put
        the mod host's ``on_result`` back. The game is the caller's. Idempotent."""
        self.closing = True
        server, thread = self._server, self._thread
        if server is not None:
            server.should_exit = True
        if thread is not None and thread is not threading.current_thread():
            thread.join(STOP_TIMEOUT_S)
            if thread.is_alive() and server is not None:
                server.force_exit = True
                thread.join(STOP_TIMEOUT_S)
        self._server = self._thread = None
        self.actions.cancel_all("the dashboard closed")
        if self.mods is not None and self.mods.on_result == self._on_result:
            self.mods.on_result = self._previous_on_result

    def __enter__(self) -> Dashboard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- inside ----------------------------------------------------------------------------

    def _on_result(self, result: ReloadResult) -> None:
        try:
            self.recorder.note_reload(result)
        except Exception as exc:  # noqa: BLE001 - as after_tick
            self._fault(exc)
        if self._previous_on_result is not None:
            self._previous_on_result(result)

    def _fault(self, exc: Exception) -> None:
        self.internal_errors += 1
        where = traceback.extract_tb(exc.__traceback__)[-1:] or None
        at = f" at {where[0].filename}:{where[0].lineno}" if where else ""
        message = f"the dashboard failed: {type(exc).__name__}: {exc}{at}"
        if self.internal_errors <= 3:
            print(f"moonbox dashboard: {message}", file=sys.stderr)
        try:
            self.recorder.log("dashboard", message)
        except Exception:  # noqa: BLE001, S110 - nothing more can be done
            pass
