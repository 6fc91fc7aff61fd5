"""Driving a fuzz run: generate cases, send them to a worker process, collect failures.

The generator runs in this process; every program runs in a worker process
(:mod:`moonbox.fuzz._worker`), one program at a time. If the worker dies (a segfault of the
VM, an abort, an OS kill) the program it was running is the reproducer of a ``crash``; if it
does not answer within a hard deadline it is killed and the program is the reproducer of a
``hang``. Either way a fresh worker takes over and the run goes on.

Host memory is checked on the worker: its resident set size is read after every program, and
once a worker has warmed up, growth past :data:`DEFAULT_RSS_GROWTH_BYTES` over its baseline
is a ``host-memory`` violation (the program that was running then is written as the
reproducer, with that caveat in its header).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed

from ..sandbox import STALL_MARGIN_S
from ._invariants import (
    CHUNK,
    DEFAULT_MARGIN_S,
    DEFAULT_WALL_S,
    ISOLATED_KILL_AFTER_S,
    MAX_RESUMES,
    Violation,
    budget_for,
)
from ._programs import FuzzCase, fuzz_cases

__all__ = [
    "DEFAULT_RSS_GROWTH_BYTES",
    "Failure",
    "FuzzReport",
    "Worker",
    "WorkerDied",
    "fuzz",
    "write_reproducer",
]

DEFAULT_RSS_GROWTH_BYTES = 384 << 20
"""Growth of the worker's resident memory over its warmed-up baseline that counts as a leak.
Programs may each hold up to 32 MiB of Lua heap for a moment, and the allocator keeps some of
what they freed; measured growth over 1000 programs stays well under this."""
RSS_WARMUP_CASES = 25
"""Programs a fresh worker runs before its resident memory is taken as the baseline."""
STARTUP_TIMEOUT_S = 60.0
HANG_SLACK_S = 10.0
"""Beyond the resumes' wall budgets and margins: time a worker gets to answer before it is
deemed hung (creating sandboxes, the walk, the sibling check, a loaded machine)."""


class WorkerDied(Exception):
    """The worker process died or hung; ``violation`` says which."""

    def __init__(self, violation: Violation) -> None:
        super().__init__(str(violation))
        self.violation = violation


class Worker:
    """One worker process (``python -m moonbox.fuzz._worker``) and the pipe to it.

    Raises:
        WorkerDied: from :meth:`check`, when the process died or did not answer in time;
            the worker is then unusable (start another).
    """

    def __init__(self, *, jit: bool, wall_s: float, margin_s: float,
                 isolate: bool = False) -> None:
        self.wall_s = wall_s
        self.margin_s = margin_s
        self.isolate = isolate
        self._stderr = tempfile.TemporaryFile()
        command = [sys.executable, "-m", "moonbox.fuzz._worker", "--wall-s", str(wall_s),
                   "--margin-s", str(margin_s)]
        if not jit:
            command.append("--no-jit")
        if isolate:
            command.append("--isolate")
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
        )
        self._buffer = b""
        hello = self._answer(STARTUP_TIMEOUT_S, "starting")
        self.rss_bytes: int = hello["rss_bytes"]
        self.cases = 0

    @property
    def pid(self) -> int:
        return self.process.pid

    def check(self, case: FuzzCase) -> dict[str, Any]:
        """Send one case; the worker's answer (violations, status, elapsed_s, rss_bytes)."""
        request = json.dumps({"source": case.source, "profile": case.profile,
                              "kind": case.kind}) + "\n"
        try:
            assert self.process.stdin is not None
            self.process.stdin.write(request.encode("utf-8", "surrogateescape"))
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            raise WorkerDied(self._death("before the program was sent")) from None
        margin_s = self.margin_s + STALL_MARGIN_S  # a long operation's resume may end later
        timeout = MAX_RESUMES * (self.wall_s + margin_s) + HANG_SLACK_S
        if self.isolate:  # the program runs twice, and an isolated worker may start again
            timeout += MAX_RESUMES * (self.wall_s + margin_s + ISOLATED_KILL_AFTER_S) \
                + STARTUP_TIMEOUT_S
        answer = self._answer(timeout, "running the program")
        self.rss_bytes = answer["rss_bytes"]
        self.cases += 1
        return answer

    def _answer(self, timeout_s: float, doing: str) -> dict[str, Any]:
        stdout = self.process.stdout
        assert stdout is not None
        fd = stdout.fileno()
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise WorkerDied(Violation(
                    "hang", f"the worker did not answer within {timeout_s:.1f} s while {doing}"
                ))
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    raise WorkerDied(self._death(f"while {doing}"))
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def _death(self, when: str) -> Violation:
        try:
            code = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.process.returncode
        if code is not None and code < 0:
            try:
                how = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"killed by signal {-code}"
        else:
            how = f"exited with status {code}"
        return Violation("crash", f"the worker process {how} {when}{self._stderr_tail()}")

    def _stderr_tail(self) -> str:
        try:
            self._stderr.seek(0, os.SEEK_END)
            size = self._stderr.tell()
            self._stderr.seek(max(0, size - 600))
            tail = self._stderr.read().decode("utf-8", "replace").strip()
        except OSError:
            return ""
        return f"; its last output: {tail[-600:]}" if tail else ""

    def kill(self) -> None:
        """Kill the worker (by its own pid) and reap it."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()

    def close(self) -> None:
        """Let the worker finish (stdin closed), or kill it if it does not."""
        try:
            if self.process.stdin is not None:
                self.process.stdin.close()
            self.process.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.kill()
        finally:
            self._stderr.close()


@dataclass
class Failure:
    """A program that broke invariants.

    Attributes:
        index: the example's number in the run (from 0).
        case: the program and its budget profile.
        violations: what it broke.
        path: the reproducer file, once written.
    """

    index: int
    case: FuzzCase
    violations: list[Violation]
    path: Path | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "example": self.index,
            "profile": self.case.profile,
            "corruption": self.case.corruption,
            "kind": self.case.kind,
            "violations": [v.to_dict() for v in self.violations],
            "reproducer": str(self.path) if self.path else None,
        }


@dataclass
class FuzzReport:
    """What a fuzz run did and found."""

    seed: int
    jit: bool
    isolate: bool = False
    examples: int = 0
    failures: list[Failure] = field(default_factory=list)
    statuses: Counter[str] = field(default_factory=Counter)
    kinds: Counter[str] = field(default_factory=Counter)
    elapsed_s: float = 0.0
    program_s: float = 0.0
    workers: int = 0
    rss_baseline_bytes: int = 0
    rss_peak_growth_bytes: int = 0

    @property
    def ok(self) -> bool:
        return not self.failures

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "seed": self.seed,
            "jit": self.jit,
            "isolate": self.isolate,
            "examples": self.examples,
            "failures": [f.to_dict() for f in self.failures],
            "statuses": dict(sorted(self.statuses.items())),
            "kinds": dict(sorted(self.kinds.items())),
            "elapsed_s": round(self.elapsed_s, 3),
            "program_s": round(self.program_s, 3),
            "workers": self.workers,
            "rss_peak_growth_bytes": self.rss_peak_growth_bytes,
        }


def fuzz(
    examples: int,
    *,
    seed: int = 0,
    jit: bool = True,
    wall_s: float = DEFAULT_WALL_S,
    margin_s: float = DEFAULT_MARGIN_S,
    rss_growth_bytes: int = DEFAULT_RSS_GROWTH_BYTES,
    out_dir: Path | None = None,
    on_example: Callable[[int, FuzzReport], None] | None = None,
    isolate: bool = False,
) -> FuzzReport:
    """Run ``examples`` generated programs, each checked against every invariant.

    The same ``seed`` generates the same programs. Each failing program is written to
    ``out_dir`` as a reproducer (when given). ``on_example(index, report)`` is called after
    each program, for progress. ``isolate``: each program also runs through
    :class:`moonbox.isolation.IsolatedSandbox` and the isolation invariants are checked
    (see :mod:`moonbox.fuzz._invariants`).
    """
    report = FuzzReport(seed=seed, jit=jit, isolate=isolate)
    start = time.perf_counter()
    state: dict[str, Any] = {"worker": None, "baseline": None, "reported_rss": False}

    def worker() -> Worker:
        if state["worker"] is None:
            state["worker"] = Worker(jit=jit, wall_s=wall_s, margin_s=margin_s, isolate=isolate)
            state["baseline"] = None
            state["reported_rss"] = False
            report.workers += 1
        return state["worker"]

    def one(case: FuzzCase) -> None:
        index = report.examples
        report.examples += 1
        report.kinds[case.kind] += 1
        violations: list[Violation] = []
        w = worker()
        try:
            answer = w.check(case)
        except WorkerDied as died:
            violations.append(died.violation)
            report.statuses[died.violation.invariant] += 1
            w.close()
            state["worker"] = None
        else:
            violations.extend(Violation(**v) for v in answer["violations"])
            report.statuses[answer["status"] or "host-exception"] += 1
            report.program_s += answer["elapsed_s"]
            rss = answer["rss_bytes"]
            if w.cases == RSS_WARMUP_CASES:
                state["baseline"] = rss
                report.rss_baseline_bytes = rss
            if state["baseline"] is not None:
                growth = rss - state["baseline"]
                report.rss_peak_growth_bytes = max(report.rss_peak_growth_bytes, growth)
                if growth > rss_growth_bytes and not state["reported_rss"]:
                    state["reported_rss"] = True
                    violations.append(Violation(
                        "host-memory",
                        f"the worker's resident memory grew {growth / 2**20:.0f} MiB over "
                        f"{w.cases - RSS_WARMUP_CASES} programs, past the bound of "
                        f"{rss_growth_bytes / 2**20:.0f} MiB (this program ran last; the "
                        "growth may be the sum of many)",
                    ))
        if violations:
            failure = Failure(index, case, violations)
            if out_dir is not None:
                failure.path = write_reproducer(out_dir, failure, seed=seed, jit=jit,
                                                wall_s=wall_s, isolate=isolate)
            report.failures.append(failure)
        if on_example is not None:
            on_example(index, report)

    @hypothesis_seed(seed)
    @settings(
        max_examples=examples,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )
    @given(fuzz_cases())
    def run_all(case: FuzzCase) -> None:
        one(case)

    try:
        if examples > 0:
            run_all()
    finally:
        if state["worker"] is not None:
            state["worker"].close()
        report.elapsed_s = time.perf_counter() - start
    return report


def write_reproducer(out_dir: Path, failure: Failure, *, seed: int, jit: bool,
                     wall_s: float, isolate: bool = False) -> Path:
    """Write a failing program as ``fuzz-<seed>-<example>.lua`` with a header comment: the
    violated invariants, the seed, the mode and the budget (and how to replay it)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"fuzz-{seed}-{failure.index}.lua"
    budget = budget_for(failure.case.profile, wall_s)
    mode = ("jit" if jit else "no-jit (count hook)") + (", isolated" if isolate else "")
    lines = [
        "-- moonbox fuzz reproducer",
        f"-- seed {seed}, example {failure.index}, mode {mode}, chunk {CHUNK}, "
        f"kind {failure.case.kind}",
        f"-- budget ({failure.case.profile}): steps={budget.steps} "
        f"alloc_bytes={budget.alloc_bytes} wall_s={budget.wall_s} "
        f"max_memory={budget.max_memory}",
    ]
    if failure.case.corruption:
        lines.append(f"-- deliberately broken: {failure.case.corruption}")
    lines.append("-- violated:")
    for v in failure.violations:
        for i, text in enumerate(str(v).splitlines() or [""]):
            lines.append(("--   " if i == 0 else "--     ") + text)
    lines.append(
        f"-- replay: moonbox run{'' if jit else ' --no-jit'}{' --isolate' if isolate else ''} "
        f"--steps {budget.steps} "
        f"--memory {budget.alloc_bytes} --time {budget.wall_s} --heap {budget.max_memory} "
        f"{path.name}"
    )
    lines.append("-- (this header shifts line numbers by its length)")
    text = "\n".join(lines) + "\n" + failure.case.source
    tmp = path.with_suffix(".lua.tmp")
    tmp.write_text(text, encoding="utf-8", errors="surrogateescape")
    os.replace(tmp, path)
    return path
