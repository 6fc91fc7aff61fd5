"""The host API a mod may call.

This is the minimal form: :class:`Binding` (a name, a pydantic argument model, a cost) and
the two default bindings ``report`` and ``add``.
"""

from ._binding import Binding, LuaNumber, Risk
from ._defaults import AddArgs, ReportArgs, add, default_bindings, report

__all__ = [
    "AddArgs", "Binding", "LuaNumber", "ReportArgs", "Risk", "add", "default_bindings", "report",
]
