"""The dashboard tests' game: mod folders written in a line, a game ticking on a thread of
its own with its dashboard served on loopback, and waiting for what it shows."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from moonbox.dashboard import Dashboard
from moonbox.engine import Game
from moonbox.mods import ModHost
from moonbox.store import Store

INSTALL_BROWSER = ("the browser tests need Chromium and Playwright: apt-get install -y "
                   "--no-install-recommends chromium chromium-driver, and pip install "
                   "playwright (or pip install -e '.[dev]')")
CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
WAIT_S = 30.0

# A mod that runs, one that trips its step budget on every tick from tick 3 on (a loop that
# cannot finish: it trips on the step count, whatever the machine's speed), one with a
# version to report.
STEADY = 'every(1, function(t) report("steady " .. t) end)\n'
SPINNER = """on("tick", function(t)
  if t >= 3 then while true do end end
end)
"""
SPINNER_LINE = "mods/spinner/main.lua:2"


def versioned(n: int) -> str:
    return f'every(1, function() report("version {n}") end)\n'


def write_mod(root: Path, mod_id: str, main: str, *, mode: str = "auto") -> Path:
    """A mod folder ``root/mod_id`` with a manifest and ``main.lua``."""
    folder = root / mod_id
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "mod.toml").write_text(f'id = "{mod_id}"\nversion = "1.0.0"\n'
                                     f'[permissions]\nmode = "{mode}"\n')
    (folder / "main.lua").write_text(main)
    return folder


def wait_for(predicate: Callable[[], Any], what: str, timeout_s: float = WAIT_S) -> Any:
    """Poll ``predicate`` until it returns something true; that value."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


class Running:
    """A game (with a mod host and a versions store) ticking on a thread of its own, its
    dashboard served on 127.0.0.1. Only the game thread touches the game once started."""

    def __init__(self, mods_dir: Path, store_path: Path | None, *, tick_s: float = 0.02,
                 game: Game | None = None, tick: bool = True, **options: Any) -> None:
        self.game = game or Game(seed=1)
        self.store = Store(store_path) if store_path is not None else None
        self.host = ModHost(self.game, mods_dir, store=self.store)
        self.dashboard = Dashboard(self.game, mods=self.host, **options)
        self.results = self.host.load_all()
        self.url = self.dashboard.start()
        self.base = self.url.split("?")[0].rstrip("/")
        self.tick_s = tick_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if tick:
            self._thread = threading.Thread(target=self._run, name="test-game", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.dashboard.tick()
            time.sleep(self.tick_s)

    def client(self, **options: Any) -> httpx.Client:
        return httpx.Client(base_url=self.base, timeout=20, **options)

    def get(self, path: str, **options: Any) -> Any:
        with self.client() as c:
            response = c.get(path, **options)
        assert response.status_code == 200, response.text
        return response.json()

    def post(self, path: str, body: Any = None) -> httpx.Response:
        with self.client() as c:
            return c.post(path, json=body if body is not None else {})

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        self.dashboard.close()
        self.host.close()
        self.game.close()
        if self.store is not None:
            self.store.close()
