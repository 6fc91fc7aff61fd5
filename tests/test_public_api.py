"""The public surface is curated: a change to it is a decision, made here."""

from __future__ import annotations

import moonbox
import moonbox.agent
import moonbox.bindings
import moonbox.dashboard
import moonbox.engine
import moonbox.isolation
import moonbox.mods
import moonbox.sandbox
import moonbox.store
import moonbox.world


def test_top_level_names():
    assert moonbox.__all__ == sorted(moonbox.__all__)
    assert moonbox.__all__ == [
        "Binding", "BindingError", "Budget", "BudgetExceeded", "Chunk", "ConfigError", "Frame",
        "HostCall", "HostError", "ModApi", "MoonboxError", "Outcome", "Permissions", "Registry",
        "Run", "Sandbox", "SandboxClosed", "ScriptError", "SourceTooLarge", "Stats", "ValueLimits",
        "default_bindings",
    ]
    for name in moonbox.__all__:
        assert hasattr(moonbox, name)


def test_subpackage_names():
    assert moonbox.sandbox.__all__ == [
        "ALLOWED_GLOBALS", "ALLOWED_LIBRARIES", "Budget", "Chunk", "DENIED", "FunctionHandle",
        "HostCall",
        "HostFunction", "LUA_KEYWORDS", "Outcome", "Run", "STALL_MARGIN_S", "Sandbox", "Stall",
        "Stats", "Status", "ValueLimits", "Watchdog", "parse_size",
    ]
    assert moonbox.bindings.__all__ == [
        "AddArgs", "Answer", "ApprovalRequest", "Approver", "BINDING_CODES", "Binding",
        "CallInfo", "Decision", "Hook", "LuaFunction", "LuaNumber", "MODES", "ModApi", "Mode",
        "Permissions", "QueryInfo", "QueryLimits", "QuerySource", "REFUSAL_CODES", "Reading",
        "Refusal", "Registry", "ReportArgs", "Risk", "Scope", "ScopeClosed", "Veto", "add",
        "default_bindings", "render_stubs", "report",
    ]

    assert moonbox.store.__all__ == [
        "CHECK_MAX_BYTES", "DEFAULT_MAX_REVISIONS", "EXPORT_FORMAT", "EXPORT_FORMAT_VERSION",
        "KEY_MAX_CHARS", "MIN_MAX_REVISIONS", "SCHEMA_VERSION", "DataOverlays", "KeyInfo",
        "Kind", "Outcome", "Revision", "RevisionRef", "ScriptVersions", "Store",
        "StoreCorrupt", "StoreError", "StoreErrorCode", "apply_overlay", "store_bindings",
    ]
    for name in moonbox.store.__all__:
        assert hasattr(moonbox.store, name)

    assert moonbox.agent.__all__ == [
        "AgentError", "ApiStyle", "Attempt", "CancelToken", "Cancelled", "ChatClient",
        "Check", "CheckResult", "ClientError", "ClientErrorCode", "CorpusTask",
        "DEFAULT_BUDGET", "Delta", "DryRun", "EVAL_BUDGET", "EvalReport", "Event",
        "EventName", "Extraction", "Failure", "FailureKind", "GAME_MOD", "GameHost",
        "GameHostFactory", "GameRun", "GoLive", "GenerationLimited", "LLMClient", "LiveMod",
        "Message", "Programmer", "ProgrammerResult", "PromptBuilder", "Published",
        "RETRYABLE_CODES", "RateLimit", "Reply", "RequestQueue", "Role", "RunResult",
        "ScratchRun", "ScratchRunResult", "Script", "ScriptedClient", "ScriptedReply",
        "Task", "ThinkSplitter", "Ticket", "TicketState", "collect", "corpus_path",
        "eval_registry", "extract_lua", "game_corpus_path", "load_corpus", "load_replies",
        "render_repair", "replies_path", "run_repair_eval", "split_reasoning",
        "world_summary",
    ]
    for name in moonbox.agent.__all__:
        assert hasattr(moonbox.agent, name)


def test_world_and_engine_names():
    assert moonbox.world.__all__ == [
        "MAX_BATCH", "MAX_FIND", "MAX_TRANSACTION", "REASONS", "SNAPSHOT_FORMAT",
        "SNAPSHOT_VERSION", "WORLD_BINDINGS", "Color", "Command", "CommandKind",
        "CommandResult", "Entity", "Prefab", "Prefabs", "Reason", "World", "WorldError",
        "default_prefabs", "entity_table", "world_bindings",
    ]
    assert moonbox.engine.__all__ == [
        "DEFAULT_BUDGET", "DEFAULT_WORKERS", "ENGINE_BINDINGS", "RUNTIME_CHUNK", "Callback",
        "EngineError", "Event", "Failure", "Game", "GameSnapshot", "Isolation", "Lost", "Mod",
        "ModLimits", "ModSnapshot", "ModStats", "Quarantine", "RestoreReport", "Task",
        "TickReport", "engine_bindings",
    ]
    for module in (moonbox.world, moonbox.engine):
        for name in module.__all__:
            assert hasattr(module, name)
    assert issubclass(moonbox.world.WorldError, moonbox.MoonboxError)
    assert issubclass(moonbox.engine.EngineError, moonbox.MoonboxError)


def test_mods_names():
    assert moonbox.mods.__all__ == [
        "ACTIVE_KEY", "DEBOUNCE_MS", "MANIFEST_NAME", "REQUIRE_CHUNK", "STEP_MS",
        "DevSession", "ModError", "ModHost", "ModManifest", "ModPackage", "ModState",
        "ModWatcher", "ReloadResult", "RequestedPermissions", "arena_mods", "copy_arena_mods",
        "describe", "discover", "grant", "load_packages", "order_packages", "parse_manifest",
        "preparer", "read_package",
    ]
    for name in moonbox.mods.__all__:
        assert hasattr(moonbox.mods, name)
    assert issubclass(moonbox.mods.ModError, moonbox.MoonboxError)


def test_dashboard_names():
    assert moonbox.dashboard.__all__ == [
        "ACTIONS", "DEFAULT_HOST", "DEFAULT_PORT", "INSTALL_HINT", "LOG_KINDS",
        "MIN_TOKEN_CHARS", "Access", "ActionError", "Dashboard", "Published", "Sources",
        "VersionHook", "is_loopback",
    ]
    for name in moonbox.dashboard.__all__:
        assert hasattr(moonbox.dashboard, name)
    assert issubclass(moonbox.dashboard.ActionError, moonbox.MoonboxError)


def test_isolation_names():
    assert moonbox.isolation.__all__ == [
        "DEFAULT_MEMORY_LIMIT_BYTES", "DEFAULT_WALL_MARGIN_S", "IsolatedChunk", "IsolatedRun",
        "IsolatedSandbox", "RemoteFunction", "Respawn", "WorkerCrashed", "WorkerPool",
        "WorkerStats",
    ]
    for name in moonbox.isolation.__all__:
        assert hasattr(moonbox.isolation, name)
    assert issubclass(moonbox.isolation.WorkerCrashed, moonbox.ScriptError)


def test_one_exception_tree():
    for name in ("BindingError", "BudgetExceeded", "ConfigError", "HostError",
                 "SandboxClosed", "ScriptError"):
        assert issubclass(getattr(moonbox, name), moonbox.MoonboxError)
    assert issubclass(moonbox.BudgetExceeded, moonbox.ScriptError)
    assert issubclass(moonbox.store.StoreError, moonbox.MoonboxError)
    for name in ("AgentError", "Cancelled", "ClientError", "GenerationLimited"):
        assert issubclass(getattr(moonbox.agent, name), moonbox.MoonboxError)
