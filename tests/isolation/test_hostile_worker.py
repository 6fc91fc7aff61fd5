"""Attacks by a worker that runs no mod code at all: a scripted process in its place (see
the ``scripted_worker`` fixture) sends what a worker taken over by a VM bug might. The host
never raises, never waits past its deadlines, and kills the worker."""

from __future__ import annotations

import psutil
import pytest

from moonbox import Budget
from moonbox.isolation import IsolatedSandbox

pytestmark = pytest.mark.usefixtures("no_workers_left_behind")


def _gone(pid: int) -> bool:
    return not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_worker_ended_by_a_signal_with_no_name_is_a_crash(scripted_worker):
    # Real-time signals (SIGRTMIN..SIGRTMAX) have no name in the signal module.
    scripted_worker("os.kill(os.getpid(), 40)")
    sb = IsolatedSandbox(Budget(wall_s=0.5), wall_margin_s=0.5)
    try:
        pid = sb.pid
        outcome = sb.start("return 1").resume()
        assert outcome.status == "error" and outcome.error.kind == "crashed"
        assert outcome.error.signal == "SIG40"
        assert "SIG40" in outcome.error.message
        assert not psutil.pid_exists(pid)  # reaped, no zombie
    finally:
        sb.close()
