"""The default bindings every mod gets: ``report`` and ``add``."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..sandbox import HostCall
from ..sandbox._marshal import format_value
from ._binding import Binding, LuaNumber

__all__ = ["ReportArgs", "AddArgs", "report", "add", "default_bindings"]


class ReportArgs(BaseModel):
    """Arguments of ``report``."""

    model_config = ConfigDict(extra="forbid")
    message: Any = Field(default=None, description="a string, or any value to render")


class AddArgs(BaseModel):
    """Arguments of ``add``."""

    model_config = ConfigDict(extra="forbid")
    a: LuaNumber = Field(description="the first number")
    b: LuaNumber = Field(description="the second number")


def _report(call: HostCall, message: Any) -> None:
    call.report(message if isinstance(message, str) else format_value(message, 4096))


def _add(call: HostCall, a: float, b: float) -> float:
    return a + b


report = Binding(
    "report",
    ReportArgs,
    _report,
    risk="read",
    group="core",
    cost=1,
    unpack=True,
    description="Add one line to the run's report (strings as they are, other values rendered).",
)
add = Binding(
    "add",
    AddArgs,
    _add,
    risk="read",
    group="core",
    cost=1,
    unpack=True,
    description="Return a + b; both must be numbers.",
)


def default_bindings() -> tuple[Binding, ...]:
    """The bindings every mod gets unless the host says otherwise: report and add."""
    return (report, add)
