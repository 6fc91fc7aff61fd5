"""The host API a mod may call: bindings, the registry, permissions, hooks, scopes, queries.

A :class:`Binding` is a named Python function with a pydantic model for its arguments. A
:class:`Registry` holds bindings, hooks and query sources; :meth:`Registry.mod` turns it
into one mod's API under that mod's :class:`Permissions`.
"""

from ._binding import Binding, LuaFunction, LuaNumber
from ._defaults import AddArgs, ReportArgs, add, default_bindings, report
from ._hooks import CallInfo, Hook, Veto
from ._permissions import MODES, Decision, Mode, Permissions, Risk
from ._query import REFUSAL_CODES, QueryInfo, QuerySource
from ._registry import Answer, ApprovalRequest, Approver, ModApi, Registry
from ._scope import Scope, ScopeClosed
from ._stubs import render_stubs

__all__ = [
    "AddArgs",
    "Answer",
    "ApprovalRequest",
    "Approver",
    "Binding",
    "CallInfo",
    "Decision",
    "Hook",
    "LuaFunction",
    "LuaNumber",
    "MODES",
    "ModApi",
    "Mode",
    "Permissions",
    "QueryInfo",
    "QuerySource",
    "REFUSAL_CODES",
    "Registry",
    "ReportArgs",
    "Risk",
    "Scope",
    "ScopeClosed",
    "Veto",
    "add",
    "default_bindings",
    "render_stubs",
    "report",
]
