"""Make docs/dashboard.png: `moonbox dev --init --dashboard` on the example arena, seen in
headless Chromium.

    python examples/dashboard_screenshot.py [OUT.png]

Needs the dev extra (Playwright's Python package) and a Chromium on the system
(`apt-get install -y --no-install-recommends chromium`). While the arena runs, the script
edits two mods as a modder might: a broken save of the scoreboard (refused, the previous
version runs on) then a good one, and a glitch that passes its dry run but spins from tick 30 on, so the
live game quarantines it after three budget trips.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
GLITCH = """-- glitch: waits for a coin by spinning in a loop that never ends, from tick 30 on.
on("tick", function(t)
  if t < 30 then return end
  local spins = 0
  while spins >= 0 do
    spins = spins + 1
  end
end)
"""


def main(out: Path) -> None:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    with tempfile.TemporaryDirectory() as tmp:
        mods = Path(tmp) / "my-mods"
        proc = subprocess.Popen(
            [sys.executable, "-m", "moonbox", "dev", str(mods), "--init", "--dashboard",
             "--port", "0", "--tps", "20"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "COLUMNS": "120"}, start_new_session=True)
        try:
            url = None
            assert proc.stdout is not None
            deadline = time.monotonic() + 60
            while url is None and time.monotonic() < deadline:
                line = proc.stdout.readline()
                if not line:
                    raise SystemExit("moonbox dev ended before serving the dashboard")
                m = re.search(r"dashboard: (http://\S+)", line)
                url = m.group(1) if m else None
            if url is None:
                raise SystemExit("moonbox dev did not print the dashboard's address")
            time.sleep(4)
            scoreboard = mods / "scoreboard" / "main.lua"
            good = scoreboard.read_text()
            scoreboard.write_text(good.replace("state_set(\"scores\", scores)",
                                               "state_set(\"scores\", scores"))  # a typo
            time.sleep(2)
            scoreboard.write_text(good.replace('report("tick " .. t', 'report("at tick " .. t'))
            time.sleep(2)
            (mods / "glitch" / "main.lua").write_text(GLITCH)
            time.sleep(6)
            with tempfile.TemporaryDirectory() as profile, sync_playwright() as p:
                browser = p.chromium.launch_persistent_context(
                    profile, executable_path=chromium, headless=True, args=CHROMIUM_ARGS,
                    viewport={"width": 1280, "height": 900}, device_scale_factor=0.75)
                page = browser.new_page()
                page.goto(url)
                page.wait_for_selector("#mods tr[data-status=quarantined]", timeout=30_000)
                page.click("#error-list li.trip")
                page.locator("#world-map circle[data-name=ann]").dispatch_event("click")
                page.click("#version-keys tr[data-key='mods/scoreboard/main.lua']")
                page.wait_for_selector("#version-history tr[data-rev]")
                page.click("#version-diff")
                page.select_option("#log-mod", "glitch")
                page.evaluate("window.scrollTo(0, 0)")
                page.wait_for_timeout(1500)
                page.screenshot(path=str(out), full_page=True)
                browser.close()
        finally:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    print(f"wrote {out} ({out.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else
         Path(__file__).resolve().parent.parent / "docs" / "dashboard.png")
