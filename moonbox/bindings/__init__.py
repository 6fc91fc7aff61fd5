"""The host API a mod may call: bindings, the registry, permissions, hooks, scopes, queries.

A :class:`Binding` is a named Python function with a pydantic model for its arguments. A
:class:`Registry` holds bindings, hooks and query sources; :meth:`Registry.mod` turns it
into one mod's API under that mod's :class:`Permissions`. Every refusal a mod can meet has
a stable code (:data:`BINDING_CODES`, :data:`REFUSAL_CODES`, or a host's own
``namespace:name``).
"""

from ._approval import Answer, ApprovalRequest, Approver
from ._binding import Binding, LuaFunction, LuaNumber
from ._codes import BINDING_CODES, Refusal
from ._defaults import AddArgs, ReportArgs, add, default_bindings, report
from ._hooks import CallInfo, Hook, Veto
from ._permissions import MODES, Decision, Mode, Permissions, Risk
from ._query import REFUSAL_CODES, QueryInfo, QueryLimits, QuerySource, Reading
from ._registry import MAX_CALL_HISTORY, CallRecord, ModApi, Registry
from ._scope import Scope, ScopeClosed
from ._stubs import render_stubs

__all__ = [
    "AddArgs",
    "Answer",
    "ApprovalRequest",
    "Approver",
    "BINDING_CODES",
    "Binding",
    "CallInfo",
    "CallRecord",
    "Decision",
    "Hook",
    "LuaFunction",
    "LuaNumber",
    "MAX_CALL_HISTORY",
    "MODES",
    "ModApi",
    "Mode",
    "Permissions",
    "QueryInfo",
    "QueryLimits",
    "QuerySource",
    "REFUSAL_CODES",
    "Reading",
    "Refusal",
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
