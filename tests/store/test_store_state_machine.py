"""Any sequence of operations keeps original, current and history consistent.

A hypothesis state machine drives a real store and the in-memory reference model
(``store_model.Model``) with the same operations, and after each step compares them whole
(every key, revision, outcome, original, current and retention limit) and checks the
invariants that hold of any store.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from store_model import (
    BASE,
    DATA_KEYS,
    SCRIPT_KEYS,
    Model,
    apply_to_store,
    check_invariants,
    open_store,
    snapshot,
)

from moonbox.store import apply_overlay

MAX_REVISIONS = 4

kinds = st.sampled_from(["script", "data"])
script_keys = st.sampled_from(SCRIPT_KEYS[:3])
data_keys = st.sampled_from(DATA_KEYS[:2])
sources = st.text(max_size=20)
payloads = st.fixed_dictionaries(
    {}, optional={"hp": st.integers(-5, 5) | st.just("bad"), "speed": st.floats(0, 10),
                  "loot": st.dictionaries(st.sampled_from(["gold", "gems"]), st.integers(0, 3))})


class StoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.folder = Path(tempfile.mkdtemp(prefix="moonbox-store-sm-"))
        self.path = self.folder / "game.db"
        self.store = open_store(self.path, MAX_REVISIONS, durable=False)
        self.model = Model(MAX_REVISIONS)

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def _both(self, op: tuple[Any, ...]) -> None:
        expected = self.model.apply(op)
        assert apply_to_store(self.store, op) == expected, op

    @rule(key=script_keys, source=sources)
    def script_success(self, key: str, source: str) -> None:
        self._both(("success", "script", key, source))

    @rule(key=script_keys, source=sources)
    def script_failure(self, key: str, source: str) -> None:
        self._both(("failure", "script", key, source))

    @rule(key=data_keys, payload=payloads)
    def data_success(self, key: str, payload: dict[str, Any]) -> None:
        self._both(("success", "data", key, payload))

    @rule(key=data_keys, payload=payloads)
    def data_failure(self, key: str, payload: dict[str, Any]) -> None:
        self._both(("failure", "data", key, payload))

    @rule(kind=kinds, index=st.integers(0, 2), rev=st.integers(1, 12))
    def rollback(self, kind: str, index: int, rev: int) -> None:
        key = (SCRIPT_KEYS if kind == "script" else DATA_KEYS)[index % 2]
        self._both(("rollback", kind, key, rev))

    @rule(kind=kinds, index=st.integers(0, 2))
    def reset(self, kind: str, index: int) -> None:
        key = (SCRIPT_KEYS if kind == "script" else DATA_KEYS)[index % 2]
        self._both(("reset", kind, key))

    @rule(kind=st.none() | kinds)
    def reset_all(self, kind: str | None) -> None:
        self._both(("reset_all", kind))

    @rule(kind=kinds, index=st.integers(0, 2), n=st.none() | st.integers(3, 6))
    def retention(self, kind: str, index: int, n: int | None) -> None:
        key = (SCRIPT_KEYS if kind == "script" else DATA_KEYS)[index % 2]
        self._both(("retention", kind, key, n))

    @rule()
    def reopen(self) -> None:
        self.store.close()
        self.store = open_store(self.path, MAX_REVISIONS, durable=False)

    @invariant()
    def matches_the_model(self) -> None:
        assert snapshot(self.store) == self.model.snapshot()

    @invariant()
    def is_consistent(self) -> None:
        check_invariants(self.store)

    @invariant()
    def effective_value_follows_current(self) -> None:
        for key in DATA_KEYS[:2]:
            k = self.model.keys.get(("data", key))
            overlay = k.revs[k.current][0] if k else None
            assert self.store.data.effective(key) == apply_overlay(BASE, overlay)


StoreMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestStoreMachine = StoreMachine.TestCase
