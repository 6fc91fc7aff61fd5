"""Who may reach a dashboard: loopback without a token, anything else only with one."""

from __future__ import annotations

import socket
import sys

import httpx
import pytest
from running_game import STEADY, write_mod

from moonbox import ConfigError
from moonbox.dashboard import MIN_TOKEN_CHARS, Access, Dashboard, is_loopback
from moonbox.engine import Game

TOKEN = "s3cret-token-for-tests"


@pytest.fixture
def game():
    with Game(seed=1) as g:
        yield g


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost", "LOCALHOST"])
def test_loopback_addresses_need_no_token(host):
    assert is_loopback(host)
    assert Access(host, None).token is None


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20", "10.0.0.1", "example.org",
                                  "127.0.0.1.example.org"])
def test_any_other_address_is_refused_without_a_token(game, host):
    assert not is_loopback(host)
    with pytest.raises(ConfigError, match="unless a token is given"):
        Dashboard(game, host=host)
    # with a token it is accepted (not started here: tests listen on loopback only)
    board = Dashboard(game, host=host, token=TOKEN)
    assert board.url.endswith(f"?token={TOKEN}")
    board.close()


@pytest.mark.parametrize("token", ["short", "x" * (MIN_TOKEN_CHARS - 1), "has a space in it!!",
                                   "tab\tinside-the-token", ""])
def test_weak_tokens_are_refused(game, token):
    with pytest.raises(ConfigError, match="at least 16"):
        Dashboard(game, host="0.0.0.0", token=token)


def test_bad_ports_and_budgets(game):
    with pytest.raises(ConfigError):
        Dashboard(game, port=70000)
    with pytest.raises(ConfigError):
        Dashboard(game, tick_budget_s=0)


def test_a_token_is_asked_of_every_api_request(running, mods_dir):
    write_mod(mods_dir, "steady", STEADY)
    r = running(mods_dir, token=TOKEN)
    base = r.base
    assert r.url == base + f"/?token={TOKEN}"
    assert httpx.get(base + "/api/summary").status_code == 401
    assert httpx.get(base + "/api/summary", headers={"Authorization": "Bearer wrong-token-xx"}
                     ).status_code == 401
    assert httpx.get(base + "/api/summary?token=wrong").status_code == 401
    assert httpx.get(base + "/api/summary",
                     headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    assert httpx.get(base + f"/api/summary?token={TOKEN}").status_code == 200
    assert httpx.post(base + "/api/mods/steady/quarantine", json={}).status_code == 401
    # the page itself holds nothing: it asks for the token from its own address
    page = httpx.get(base + "/")
    assert page.status_code == 200 and "moonbox" in page.text
    assert "default-src 'none'" in page.headers["content-security-policy"]


def test_without_a_token_only_loopback_names_are_answered(running, mods_dir):
    """A page elsewhere cannot reach the dashboard through a name that resolves to
    127.0.0.1: the Host header must name a loopback address."""
    write_mod(mods_dir, "steady", STEADY)
    r = running(mods_dir)
    port = r.dashboard.port
    for host, status in ((f"127.0.0.1:{port}", 200), (f"localhost:{port}", 200),
                         (f"[::1]:{port}", 200), (f"attacker.example:{port}", 401),
                         ("attacker.example", 401)):
        answer = httpx.get(r.base + "/api/summary", headers={"Host": host})
        assert answer.status_code == status, host
    assert httpx.get(r.base + "/", headers={"Host": "attacker.example"}).status_code == 401


def test_actions_take_json_from_the_dashboards_own_page(running, mods_dir):
    write_mod(mods_dir, "steady", STEADY)
    r = running(mods_dir)
    url = r.base + "/api/mods/steady/quarantine"
    form = httpx.post(url, data={"reason": "x"})  # what a form on another site could send
    assert form.status_code == 415
    foreign = httpx.post(url, json={}, headers={"Origin": "http://attacker.example"})
    assert foreign.status_code == 403
    own = httpx.post(url, json={}, headers={"Origin": r.base})
    assert own.status_code == 200, own.text


def test_a_port_in_use_is_a_config_error(game):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        board = Dashboard(game, port=taken.getsockname()[1])
        with pytest.raises(ConfigError, match="choose another port"):
            board.start()
        board.close()


def test_without_the_extra_start_names_it(game, monkeypatch):
    monkeypatch.setitem(sys.modules, "uvicorn", None)  # as if not installed
    board = Dashboard(game)
    with pytest.raises(ConfigError, match=r"moonbox\[dashboard\]"):
        board.start()
    board.close()
