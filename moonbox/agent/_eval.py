"""Repair evaluation: a corpus of tasks through the loop, solved counts per round.

The corpus (``corpus/tasks.json``) lists tasks with their text, permissions, an optional
budget and an acceptance check written as data. The tasks run against a small evaluation
registry (``report``, ``add``, and ``spawn``/``count``/``despawn`` over a scratch list
that each run starts empty), through the host dry-run hook :class:`ScratchRun`, so the
evaluation needs no world. ``corpus/replies.jsonl`` scripts the replies of every task,
written to exercise every failure kind the loop feeds back.

Game tasks (``corpus/game_tasks.json``) run in a game instead: a task's ``game`` gives
the fork's ticks and the other mods of the game; the Programmer writes the mod ``eval``
of that game through :class:`~moonbox.agent.LiveMod` (attempts in forks, the success
live), and the checks read the fork's world and the mod's state (``entity``,
``state``, ``state_at_least``). The game comes from the caller's ``game_host`` (the
command line makes one from a mods folder, see ``moonbox eval-repair``).

Round ``r`` counts the tasks solved within ``r`` repairs (round 0: first attempts).
"""

from __future__ import annotations

import csv
import json
import math
import threading
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from .._errors import ConfigError, ScriptError
from ..bindings import Binding, LuaNumber, Permissions, Registry, default_bindings
from ..sandbox import Budget, Outcome, Stats
from ._client import LLMClient
from ._game import GameHost, LiveMod
from ._loop import Event, Programmer, ProgrammerResult, RateLimit, Script, Task
from ._repair import Check
from ._scripted import ScriptedClient, load_replies

__all__ = [
    "CorpusTask",
    "EVAL_BUDGET",
    "EvalReport",
    "GAME_MOD",
    "GameHostFactory",
    "ScratchRun",
    "ScratchRunResult",
    "corpus_path",
    "game_corpus_path",
    "eval_registry",
    "load_corpus",
    "replies_path",
    "run_repair_eval",
]

EVAL_BUDGET = Budget(steps=200_000, alloc_bytes="2MB", wall_s=0.25, max_memory="16MB")
"""The budget of corpus tasks that do not give their own."""

FAILURE_KINDS = ("syntax", "runtime", "budget_steps", "budget_memory", "budget_time",
                 "denied", "check", "no_code", "refused")

GAME_MOD = "eval"
"""The mod a game task's Programmer writes."""


def game_corpus_path() -> Path:
    """The shipped game tasks."""
    return Path(str(resources.files(__package__).joinpath("corpus").joinpath(
        "game_tasks.json")))


def corpus_path() -> Path:
    """The shipped corpus of tasks."""
    return Path(str(resources.files(__package__).joinpath("corpus").joinpath("tasks.json")))


def replies_path() -> Path:
    """The shipped scripted replies for the corpus."""
    return Path(str(resources.files(__package__).joinpath("corpus").joinpath("replies.jsonl")))


# -- the evaluation registry ----------------------------------------------------------------

_scratch = threading.local()


class SpawnArgs(BaseModel):
    """Arguments of ``spawn``."""

    prefab: str = Field(description="what to spawn: goblin, orc, tree, ...")
    x: LuaNumber = Field(0.0, description="x position")
    y: LuaNumber = Field(0.0, description="y position")


class CountArgs(BaseModel):
    """Arguments of ``count``."""

    prefab: str | None = Field(None, description="only this prefab; nil: all")


class DespawnArgs(BaseModel):
    """Arguments of ``despawn``."""

    id: int = Field(description="the entity id spawn returned")


def _entities() -> list[dict[str, Any]]:
    entities = getattr(_scratch, "entities", None)
    if entities is None:
        raise RuntimeError("the scratch-world bindings run only inside a ScratchRun")
    return entities  # type: ignore[no-any-return]


def _spawn(call: Any, args: SpawnArgs) -> int:
    entities = _entities()
    entities.append({"id": len(entities) + 1, "prefab": args.prefab, "x": args.x, "y": args.y})
    return len(entities)


def _count(call: Any, args: CountArgs) -> int:
    return sum(1 for e in _entities() if args.prefab in (None, e["prefab"]))


def _despawn(call: Any, args: DespawnArgs) -> bool:
    entities = _entities()
    before = len(entities)
    entities[:] = [e for e in entities if e["id"] != args.id]
    return len(entities) < before


def eval_registry() -> Registry:
    """``report``, ``add``, ``query``, and the scratch-world bindings of the corpus.

    ``spawn`` (write) explains its denial; ``despawn`` (danger) does not, so a script
    that calls it without permission meets a nil global: both denial paths are covered.
    """
    registry = Registry(default_bindings())
    registry.register(Binding("spawn", SpawnArgs, _spawn, risk="write", group="world",
                              description="Spawn a prefab at (x, y); returns its id.",
                              explain_denial=True))
    registry.register(Binding("count", CountArgs, _count, risk="read", group="world",
                              description="How many entities (of one prefab) exist."))
    registry.register(Binding("despawn", DespawnArgs, _despawn, risk="danger", group="world",
                              description="Remove an entity; true if it existed."))
    return registry


@dataclass(frozen=True, slots=True)
class ScratchRunResult:
    """An outcome plus the entities the run spawned in its scratch world."""

    status: str
    values: tuple[Any, ...]
    error: ScriptError | None
    reports: tuple[str, ...]
    stats: Stats
    entities: tuple[dict[str, Any], ...]

    @property
    def value(self) -> Any:
        return Outcome(self.status, self.values).value  # type: ignore[arg-type]


class ScratchRun:
    """A dry-run hook: a fresh sandbox and an empty scratch world for every run."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry

    def __call__(self, script: Script) -> ScratchRunResult:
        api = self.registry.mod(script.mod_id, script.permissions)
        _scratch.entities = []
        try:
            with api.sandbox(script.budget) as sandbox:
                outcome = sandbox.run(script.source, script.chunk)
            return ScratchRunResult(outcome.status, outcome.values, outcome.error,
                                    outcome.reports, outcome.stats,
                                    tuple(dict(e) for e in _scratch.entities))
        finally:
            _scratch.entities = None
            api.close()


# -- the corpus -------------------------------------------------------------------------------

@dataclass(frozen=True)
class CorpusTask:
    """One task of the corpus: its text, permissions, budget and acceptance check."""

    id: str
    text: str
    permissions: Permissions
    budget: Budget | None
    check: dict[str, Any]
    world_summary: str = ""
    game: dict[str, Any] | None = None
    """For a game task: ``ticks`` (the fork's, default 1) and ``mods`` (id -> main.lua
    of the game's other mods)."""

    def task(self) -> Task:
        return Task(self.text, key=f"eval:{self.id}", permissions=self.permissions,
                    checks=tuple(checks_from_spec(self.check)), budget=self.budget,
                    world_summary=self.world_summary)


def load_corpus(path: str | Path | None = None) -> list[CorpusTask]:
    """The tasks of a corpus file (default: the shipped one).

    Raises:
        ConfigError: the file cannot be read or a task is malformed.
    """
    path = Path(path) if path is not None else corpus_path()
    try:
        items = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the corpus {path}: {exc}") from None
    tasks = []
    seen: set[str] = set()
    for item in items["tasks"] if isinstance(items, dict) else items:
        try:
            task = CorpusTask(
                id=str(item["id"]), text=str(item["text"]),
                permissions=Permissions(**item.get("permissions", {})),
                budget=Budget(**item["budget"]) if item.get("budget") else None,
                check=dict(item.get("check", {})),
                world_summary=str(item.get("world", "")),
                game=dict(item["game"]) if item.get("game") is not None else None,
            )
            checks_from_spec(task.check)
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{path}: task {item.get('id', '?')!r} is malformed: {exc}"
                              ) from None
        if task.id in seen:
            raise ConfigError(f"{path}: two tasks are named {task.id!r}")
        seen.add(task.id)
        tasks.append(task)
    return tasks


def checks_from_spec(spec: dict[str, Any]) -> list[Check]:
    """Acceptance checks from their data form.

    ``returns`` (the value, numbers compared to 1e-9), ``reports`` (the exact lines),
    ``report_contains`` (a substring of some line), ``spawned`` (``{prefab: count}``,
    exactly), ``spawned_within`` (``{"x", "y", "radius"}``: every entity that close).

    Raises:
        ValueError: an unknown kind of check.
    """
    checks: list[Check] = []
    for kind, expected in spec.items():
        maker = _CHECKS.get(kind)
        if maker is None:
            raise ValueError(f"unknown check {kind!r}; known: {sorted(_CHECKS)}")
        check = maker(expected)
        check.name = kind  # type: ignore[attr-defined]
        checks.append(check)
    return checks


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool) \
            and not isinstance(b, bool):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _returns(expected: Any) -> Callable[[Any], str | None]:
    def check(result: Any) -> str | None:
        values = tuple(getattr(result, "values", ()))
        got = None if not values else values[0] if len(values) == 1 else list(values)
        return None if _same(got, expected) else \
            f"expected the script to return {json.dumps(expected)}, it returned {_show(got)}"
    return check


def _reports(expected: list[str]) -> Callable[[Any], str | None]:
    def check(result: Any) -> str | None:
        got = list(getattr(result, "reports", ()))
        return None if got == list(expected) else \
            f"expected the report lines {json.dumps(expected)}, got {json.dumps(got)}"
    return check


def _report_contains(expected: str) -> Callable[[Any], str | None]:
    def check(result: Any) -> str | None:
        got = list(getattr(result, "reports", ()))
        return None if any(expected in line for line in got) else \
            f"expected a report line containing {expected!r}, got {json.dumps(got)}"
    return check


def _spawned(expected: dict[str, int]) -> Callable[[Any], str | None]:
    def check(result: Any) -> str | None:
        got: dict[str, int] = {}
        for entity in getattr(result, "entities", ()):
            got[entity["prefab"]] = got.get(entity["prefab"], 0) + 1
        return None if got == expected else \
            f"expected to spawn {json.dumps(expected)}, spawned {json.dumps(got)}"
    return check


def _spawned_within(area: dict[str, float]) -> Callable[[Any], str | None]:
    def check(result: Any) -> str | None:
        far = [e for e in getattr(result, "entities", ())
               if math.hypot(e["x"] - area.get("x", 0), e["y"] - area.get("y", 0))
               > area["radius"] + 1e-6]
        if far:
            e = far[0]
            return (f"{len(far)} entities are farther than {area['radius']:g} from "
                    f"({area.get('x', 0):g}, {area.get('y', 0):g}), e.g. {e['prefab']} at "
                    f"({e['x']:g}, {e['y']:g})")
        return None
    return check


def _entity(expected: dict[str, Any]) -> Callable[[Any], str | None]:
    def check(result: Any) -> str | None:
        world = getattr(result, "world", None)
        name = expected["name"]
        e = world.get(name) if world is not None else None
        if e is None:
            return f"expected an entity named {name!r} in the world, there is none"
        if "prefab" in expected and e.prefab != expected["prefab"]:
            return f"{name!r} is a {e.prefab}, expected a {expected['prefab']}"
        for axis in ("x", "y"):
            if axis in expected and not _same(getattr(e, axis), expected[axis]):
                return (f"{name!r} is at ({e.x:g}, {e.y:g}), expected {axis} = "
                        f"{expected[axis]:g}")
            low = expected.get(f"min_{axis}")
            if low is not None and getattr(e, axis) < low:
                return (f"{name!r} is at ({e.x:g}, {e.y:g}) after the ticks, expected "
                        f"{axis} >= {low:g}")
        return None
    return check


def _state(expected: dict[str, Any]) -> Callable[[Any], str | None]:
    def check(result: Any) -> str | None:
        state = getattr(result, "state", {}) or {}
        for key, value in expected.items():
            if not _same(state.get(key), value):
                return f"expected state {key!r} = {_show(value)}, it is {_show(state.get(key))}"
        return None
    return check


def _state_at_least(expected: dict[str, float]) -> Callable[[Any], str | None]:
    def check(result: Any) -> str | None:
        state = getattr(result, "state", {}) or {}
        for key, low in expected.items():
            got = state.get(key)
            if not isinstance(got, int | float) or got < low:
                return f"expected state {key!r} >= {low:g}, it is {_show(got)}"
        return None
    return check


_CHECKS: dict[str, Callable[[Any], Callable[[Any], str | None]]] = {
    "entity": _entity,
    "state": _state,
    "state_at_least": _state_at_least,
    "returns": _returns,
    "reports": _reports,
    "report_contains": _report_contains,
    "spawned": _spawned,
    "spawned_within": _spawned_within,
}


def _show(value: Any) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


# -- running it -------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class TaskOutcome:
    """How one corpus task went: solved at which attempt, the failure kind of each."""

    id: str
    status: str
    solved_at: int | None
    kinds: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "status": self.status, "solved_at": self.solved_at,
                "failures": list(self.kinds)}


@dataclass(frozen=True)
class EvalReport:
    """Per-task results and per-round counts of a repair evaluation."""

    max_repairs: int
    tasks: tuple[TaskOutcome, ...]
    results: tuple[ProgrammerResult, ...] = field(repr=False, default=())

    @property
    def total(self) -> int:
        return len(self.tasks)

    def rows(self) -> list[dict[str, Any]]:
        """One row per round: tasks solved that round, cumulatively, and failure kinds."""
        rows = []
        for r in range(self.max_repairs + 1):
            attempt = r + 1
            row: dict[str, Any] = {
                "round": r,
                "attempted": sum(1 for t in self.tasks if len(t.kinds) + (t.solved_at is not None)
                                 >= attempt),
                "solved_this_round": sum(1 for t in self.tasks if t.solved_at == attempt),
                "solved": sum(1 for t in self.tasks if t.solved_at is not None
                              and t.solved_at <= attempt),
                "total": self.total,
            }
            row["solved_fraction"] = round(row["solved"] / self.total, 4) if self.total else 0.0
            for kind in FAILURE_KINDS:
                row[kind] = sum(1 for t in self.tasks if len(t.kinds) >= attempt
                                and t.kinds[attempt - 1] == kind)
            rows.append(row)
        return rows

    def write_csv(self, path: str | Path) -> None:
        """The per-round rows as CSV, a header line first (plot-ready)."""
        rows = self.rows()
        with open(path, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["round"])
            writer.writeheader()
            writer.writerows(rows)

    def to_dict(self) -> dict[str, Any]:
        return {"max_repairs": self.max_repairs, "total": self.total, "rounds": self.rows(),
                "tasks": [t.to_dict() for t in self.tasks]}


GameHostFactory = Callable[[CorpusTask], AbstractContextManager[GameHost]]
"""Makes the game of a game task: a host (a :class:`moonbox.mods.ModHost`) running the
mod :data:`GAME_MOD` (a stub to be written) and the task's other mods."""


def run_repair_eval(
    tasks: Iterable[CorpusTask],
    *,
    game_host: GameHostFactory | None = None,
    client: LLMClient | None = None,
    replies: str | Path | None = None,
    max_repairs: int = 3,
    registry: Registry | None = None,
    stream: bool = False,
    on_event: Callable[[str, Event], None] | None = None,
    on_task: Callable[[CorpusTask, ProgrammerResult], None] | None = None,
) -> EvalReport:
    """Run every task through the loop; count what each round solved.

    Args:
        tasks: the corpus.
        client: the backend for every task; ``None``: a scripted client per task from
            ``replies`` (default: the shipped replies).
        max_repairs: repair rounds per task.
        registry: default :func:`eval_registry`.
        on_event: called with the task id and each event.
        on_task: called after each task.
        game_host: makes the game of each game task.

    Raises:
        ConfigError: a game task without ``game_host``.
    """
    registry = registry or eval_registry()
    dry_run = ScratchRun(registry)
    replies_file = Path(replies) if replies is not None else replies_path()
    outcomes: list[TaskOutcome] = []
    results: list[ProgrammerResult] = []
    for corpus_task in tasks:
        task_client = client or ScriptedClient(load_replies(replies_file, task=corpus_task.id))
        listener = None
        if on_event is not None:
            task_id = corpus_task.id
            listener = lambda event, task_id=task_id: on_event(task_id, event)  # noqa: E731
        if corpus_task.game is not None:
            if game_host is None:
                raise ConfigError(f"task {corpus_task.id!r} is a game task: give game_host")
            with game_host(corpus_task) as host:
                target = LiveMod(host, GAME_MOD, ticks=int(corpus_task.game.get("ticks", 1)))
                programmer = target.programmer(
                    task_client, max_repairs=max_repairs, store=None,
                    rate_limit=RateLimit(10_000, 60.0), stream=stream, on_event=listener)
                result = programmer.run(
                    target.task(corpus_task.text,
                                checks=tuple(checks_from_spec(corpus_task.check))),
                    trace_id=f"eval-{corpus_task.id}")
        else:
            programmer = Programmer(
                task_client, registry, budget=EVAL_BUDGET, max_repairs=max_repairs,
                dry_run=dry_run, rate_limit=RateLimit(10_000, 60.0), stream=stream,
                on_event=listener)
            result = programmer.run(corpus_task.task(), trace_id=f"eval-{corpus_task.id}")
        kinds = tuple(_kind(a.failure) for a in result.attempts if a.failure is not None)
        solved_at = result.attempts[-1].number if result.solved else None
        outcomes.append(TaskOutcome(corpus_task.id, result.status, solved_at, kinds))
        results.append(result)
        if on_task is not None:
            on_task(corpus_task, result)
    return EvalReport(max_repairs, tuple(outcomes), tuple(results))


def _kind(failure: Any) -> str:
    if failure.kind == "budget":
        return f"budget_{failure.budget}"
    return str(failure.kind)
