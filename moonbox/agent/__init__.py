"""The agent: LLM clients, prompt assembly, and the Programmer's repair loop.

A :class:`Programmer` asks an :class:`LLMClient` for Lua, runs what it extracts in a
sandbox built from the bindings registry (or through the host's dry-run hook), feeds every
failure back to the model, and records the version that works in the versions store.
Clients: :class:`ChatClient` (any chat-completions server) and :class:`ScriptedClient`
(replays a file). :class:`RequestQueue` schedules agent work by priority with latest-wins
scopes. See docs/agent.md.
"""

from ._cancel import CancelToken
from ._client import Delta, LLMClient, Message, Reply, Role, collect
from ._errors import (
    RETRYABLE_CODES,
    AgentError,
    Cancelled,
    ClientError,
    ClientErrorCode,
    GenerationLimited,
)
from ._eval import (
    EVAL_BUDGET,
    GAME_MOD,
    CorpusTask,
    EvalReport,
    GameHostFactory,
    ScratchRun,
    ScratchRunResult,
    corpus_path,
    eval_registry,
    game_corpus_path,
    load_corpus,
    replies_path,
    run_repair_eval,
)
from ._extract import Extraction, extract_lua
from ._game import GameHost, GameRun, LiveMod, world_summary
from ._http import ChatClient
from ._loop import (
    DEFAULT_BUDGET,
    Attempt,
    DryRun,
    Event,
    EventName,
    GoLive,
    Programmer,
    ProgrammerResult,
    Published,
    RateLimit,
    Script,
    Task,
)
from ._prompt import ApiStyle, PromptBuilder
from ._queue import RequestQueue, Ticket, TicketState
from ._reasoning import ThinkSplitter, split_reasoning
from ._repair import Check, CheckResult, Failure, FailureKind, RunResult, render_repair
from ._scripted import ScriptedClient, ScriptedReply, load_replies

__all__ = [
    "AgentError",
    "ApiStyle",
    "Attempt",
    "CancelToken",
    "Cancelled",
    "ChatClient",
    "Check",
    "CheckResult",
    "ClientError",
    "ClientErrorCode",
    "CorpusTask",
    "DEFAULT_BUDGET",
    "Delta",
    "DryRun",
    "EVAL_BUDGET",
    "EvalReport",
    "Event",
    "EventName",
    "Extraction",
    "Failure",
    "FailureKind",
    "GAME_MOD",
    "GameHost",
    "GameHostFactory",
    "GameRun",
    "GoLive",
    "GenerationLimited",
    "LLMClient",
    "LiveMod",
    "Message",
    "Programmer",
    "ProgrammerResult",
    "PromptBuilder",
    "Published",
    "RETRYABLE_CODES",
    "RateLimit",
    "Reply",
    "RequestQueue",
    "Role",
    "RunResult",
    "ScratchRun",
    "ScratchRunResult",
    "Script",
    "ScriptedClient",
    "ScriptedReply",
    "Task",
    "ThinkSplitter",
    "Ticket",
    "TicketState",
    "collect",
    "corpus_path",
    "eval_registry",
    "extract_lua",
    "game_corpus_path",
    "load_corpus",
    "load_replies",
    "render_repair",
    "replies_path",
    "run_repair_eval",
    "split_reasoning",
    "world_summary",
]
