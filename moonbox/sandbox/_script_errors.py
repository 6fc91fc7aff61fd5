"""How a resume that did not plainly yield ends: the script's fault or budget trip as the
host's exceptions (chunk, line, the mod's frames), and the heap recovered after an
out-of-memory trip."""

from __future__ import annotations

import logging
import re
from typing import Any

from .._errors import BudgetExceeded, Frame, SandboxClosed, ScriptError
from ._outcome import BAD_VALUE, BUDGET, DONE, PREEMPTED, YIELDED, Outcome, Stats
from ._protocols import RunState, SandboxState
from ._values import lua_text, resume_values

log = logging.getLogger("moonbox.sandbox")

# After an out-of-memory trip and a full collection, a heap still above this share of the
# cap means the mod keeps that memory alive: the runtime is replaced.
_REPLACE_ABOVE = 0.75

# "chunk:line: message", as Lua positions an error.
POSITION = re.compile(r"^(.*?):(\d+): (.*)$", re.DOTALL)

# The position a frame of the prelude gives an error it was in (only a stack overflow
# ever is): the host's chunk and line, which a mod never sees.
_PRELUDE_POSITION = re.compile(r"^\[moonbox (?:prelude|patterns)\]:\d+: ", re.DOTALL)


def short_chunk(chunk: str) -> str:
    """A chunk name as Lua shows it in positions: ``@mods/a.lua`` as ``mods/a.lua``."""
    return chunk[1:] if chunk[:1] in ("@", "=") else chunk


def ended_outcome(
    sb: SandboxState, run: RunState, res: Any, first_report: int, wall: float, memory_limit: int
) -> Outcome:
    """The outcome of a resume other than a plain yield (see :meth:`Run.resume`).

    ``memory_limit`` is the limit the allocator held the resume to: its growth allowance
    or the heap cap.
    """
    sb._loosen()
    reports = tuple(run.reports[first_report:])
    if res is None:  # out of memory again in the host's own Lua code, after the mod's
        sb._rt.gccollect()
        err = BudgetExceeded("memory", memory_limit, memory_limit, chunk=run.chunk.name)
        after_memory_trip(sb, run)
        return Outcome("budget", (), err, reports, Stats(0, sb.budget.max_memory, wall))
    if type(res) is not tuple:
        raise SandboxClosed(f"the run of {run.chunk.name} is finished")
    status = res[0]
    stats = Stats(int(res[1]), int(res[2]), wall)
    if status == YIELDED or status == DONE:
        values = () if len(res) == 3 else resume_values(sb, res)
        return Outcome("done" if status == DONE else "yielded", values, None, reports, stats)
    if status == PREEMPTED:
        return Outcome("preempted", (), None, reports, stats)
    if status == BAD_VALUE:
        what = "returned" if res[4] == DONE else "yielded"
        msg = lua_text(res[3]).replace("value", f"the {what} value", 1)
        return Outcome("error", (), ScriptError(msg, chunk=run.chunk.name), reports, stats)
    info = res[3]
    frames = frames_of(info[b"traceback"])
    if status == BUDGET:
        err = budget_error(info, frames, run.chunk.name)
        if err.budget == "memory":
            after_memory_trip(sb, run)
        return Outcome("budget", (), err, reports, stats)
    err = runtime_error(lua_text(info[b"message"]), frames, run.chunk.name)
    if err.message in run._denials:
        err.kind = "denied"
    return Outcome("error", (), err, reports, stats)


def budget_error(info: Any, frames: tuple[Frame, ...], chunk_name: str) -> BudgetExceeded:
    """The trip the prelude describes in ``info``, placed where the mod was."""
    kind = lua_text(info[b"kind"])
    limit, used = info[b"limit"], info[b"used"]
    if kind == "time":
        limit, used = float(limit), float(used)
    else:
        limit, used = int(limit), int(used)
    chunk = lua_text(info[b"chunk"]) if info[b"chunk"] is not None else None
    line = int(info[b"line"]) if info[b"line"] is not None else None
    if chunk is None and frames:
        chunk, line = frames[0].chunk, frames[0].line
    return BudgetExceeded(kind, limit, used, chunk=chunk or chunk_name,  # type: ignore[arg-type]
                          line=line, traceback=frames)


def after_memory_trip(sb: SandboxState, run: RunState) -> None:
    """Ends ``run`` after an out-of-memory trip and frees the heap; a heap the mod still
    keeps full replaces the runtime."""
    sb._loosen()
    sb._runs.pop(run._id, None)
    run.status = "budget"
    run._open = False
    run._c_co = run._c_run = 0  # before its coroutine and figures may be freed
    sb._h_close(run._id)
    sb._rt.gccollect()
    if sb._rt.get_memory_used(total=True) > sb.budget.max_memory * _REPLACE_ABOVE:
        log.warning("heap still full after an out-of-memory trip: replacing the runtime")
        sb.reset()


def frames_of(table: Any) -> tuple[Frame, ...]:
    """The mod's frames the prelude listed (innermost first)."""
    frames = []
    for i in range(1, len(table) + 1):
        f = table[i]
        name = f[b"name"]
        frames.append(
            Frame(lua_text(f[b"chunk"]), int(f[b"line"]) if f[b"line"] else None,
                  lua_text(name) if name is not None else None)
        )
    return tuple(frames)


def runtime_error(message: str, frames: tuple[Frame, ...], chunk: str) -> ScriptError:
    """A runtime error, placed at the position its message names when that is the mod's,
    else at its innermost frame (the prelude's own position is dropped)."""
    message = _PRELUDE_POSITION.sub("", message, count=1)
    m = POSITION.match(message)
    if m:
        where = m.group(1)
        for frame in frames:
            short = short_chunk(frame.chunk)
            if where == short or (where.startswith("...") and short.endswith(where[3:])):
                return ScriptError(m.group(3), chunk=frame.chunk, line=int(m.group(2)),
                                   traceback=frames)
        if where == short_chunk(chunk):
            return ScriptError(m.group(3), chunk=chunk, line=int(m.group(2)),
                               traceback=frames)
    if frames:
        return ScriptError(message, chunk=frames[0].chunk, line=frames[0].line,
                           traceback=frames)
    return ScriptError(message, chunk=chunk, traceback=frames)
