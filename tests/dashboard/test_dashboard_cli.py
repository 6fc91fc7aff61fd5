"""`moonbox dev --dashboard`: its options, and a run that serves while it ticks."""

from __future__ import annotations

import re

import httpx
import pytest
from click.testing import CliRunner
from running_game import STEADY, write_mod

from moonbox.cli import cli


@pytest.mark.parametrize(("args", "message"), [
    (["--dashboard", "--bind", "0.0.0.0"], "unless a token is given"),
    (["--dashboard", "--bind", "0.0.0.0", "--token", "short"], "at least 16"),
    (["--port", "9000"], "need --dashboard"),
    (["--token", "a-long-enough-token"], "need --dashboard"),
    (["--dashboard", "--once"], "without --once"),
])
def test_usage_errors(mods_dir, args, message):
    write_mod(mods_dir, "steady", STEADY)
    result = CliRunner().invoke(cli, ["dev", str(mods_dir), "--no-store", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_a_headless_run_serves_while_it_ticks(mods_dir):
    write_mod(mods_dir, "steady", STEADY)
    result = CliRunner().invoke(cli, ["dev", str(mods_dir), "--no-store", "--ticks", "5",
                                      "--tps", "200", "--dashboard", "--port", "0"])
    assert result.exit_code == 0, result.output
    m = re.search(r"dashboard: (http://127\.0\.0\.1:\d+/)", result.output)
    assert m, result.output
    assert "steady 5" in result.output
    with pytest.raises(httpx.ConnectError):  # stopped when the run ended
        httpx.get(m.group(1) + "api/summary", timeout=5)


def test_a_port_in_use_is_a_usage_error(mods_dir):
    import socket

    write_mod(mods_dir, "steady", STEADY)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(cli, ["dev", str(mods_dir), "--no-store", "--ticks", "1",
                                          "--dashboard", "--port", str(port)])
    assert result.exit_code == 2, result.output
    assert "choose another port" in result.output
