"""LLM routing by role: endpoints, profiles and a role -> profile map, from a config file.

An *endpoint* is a server (base URL, the environment variable holding its key, timeouts,
retry policy); a *profile* is a model on an endpoint with its request options; the
*roles* map says which profile serves each role (``programmer``, ...). A
:class:`Router` makes one :class:`ChatClient` per profile, on first use, and gives each
role a :class:`RoleClient`: an :class:`LLMClient` that asks whatever profile its role maps
to at the moment of each request, so :meth:`Router.switch` takes effect at the next
generation of a running loop without touching it. :meth:`Router.check` probes every role's
backend (``moonbox agent --check``).

The file is TOML::

    [endpoints.local]
    base_url = "http://127.0.0.1:8080/v1"
    idle_timeout_s = 120
    retry = { max_retries = 2, backoff_s = 1.0 }

    [endpoints.hosted]
    base_url = "https://llm.example.net/v1"
    api_key_env = "HOSTED_KEY"

    [profiles.small]
    endpoint = "local"
    model = "coder-7b"
    temperature = 0.2

    [profiles.large]
    endpoint = "hosted"
    model = "coder-70b"
    max_tokens = 4096

    [roles]
    programmer = "small"
    reviewer = "large"
"""

from __future__ import annotations

import threading
import tomllib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .._errors import ConfigError
from ._cancel import CancelToken
from ._client import Delta, LLMClient, Message, Reply, _takes_cancel
from ._http import ChatClient

__all__ = ["Endpoint", "Profile", "Readiness", "RetryPolicy", "RoleClient", "Router",
           "RoutingConfig"]

_NAME = r"^[A-Za-z0-9_.-]{1,64}$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RetryPolicy(_Strict):
    """How a client retries 429, 5xx and connection failures (see :class:`ChatClient`)."""

    max_retries: int = Field(3, ge=0, le=20)
    backoff_s: float = Field(0.5, ge=0)
    max_backoff_s: float = Field(8.0, ge=0)
    max_retry_after_s: float = Field(60.0, ge=0)


class Endpoint(_Strict):
    """A chat-completions server.

    Attributes:
        base_url: up to and including the API prefix (``http://127.0.0.1:8080/v1``).
        api_key_env: the environment variable holding the key (read when the client is
            made, never stored in the config); ``None``: no key.
        connect_timeout_s, idle_timeout_s, total_timeout_s: as :class:`ChatClient`.
        retry: the retry policy of requests to it.
    """

    base_url: str = Field(pattern=r"^https?://")
    api_key_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    connect_timeout_s: float = Field(10.0, gt=0)
    idle_timeout_s: float = Field(60.0, gt=0)
    total_timeout_s: float = Field(600.0, gt=0)
    retry: RetryPolicy = RetryPolicy()


class Profile(_Strict):
    """A model on an endpoint, with its request options.

    Attributes:
        endpoint: the endpoint's name.
        model: the model name sent with each request.
        max_tokens, temperature: per request (``None``: the server's default).
        retry: overrides the endpoint's retry policy for this profile.
        extra_body: more JSON fields for every request (``{"top_p": 0.9}``).
    """

    endpoint: str
    model: str = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0)
    retry: RetryPolicy | None = None
    extra_body: dict[str, Any] = Field(default_factory=dict)


class RoutingConfig(_Strict):
    """Endpoints, profiles and the role -> profile map, checked as a whole.

    Raises (on construction): ``ValidationError`` for a bad field, a profile naming an
    unknown endpoint, or a role naming an unknown profile (:meth:`load` turns these into
    :class:`ConfigError`).
    """

    endpoints: dict[str, Endpoint]
    profiles: dict[str, Profile]
    roles: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _names_resolve(self) -> RoutingConfig:
        import re

        for kind, names in (("endpoint", self.endpoints), ("profile", self.profiles),
                            ("role", self.roles)):
            for name in names:
                if not re.match(_NAME, name):
                    raise ValueError(f"{kind} name {name!r}: use 1-64 letters, digits, "
                                     "'_', '.' or '-'")
        for name, profile in self.profiles.items():
            if profile.endpoint not in self.endpoints:
                raise ValueError(f"profile {name!r} names the endpoint {profile.endpoint!r}, "
                                 f"which is not defined")
        for role, profile in self.roles.items():
            if profile not in self.profiles:
                raise ValueError(f"role {role!r} maps to the profile {profile!r}, which is "
                                 "not defined")
        return self

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, where: str = "the routing config"
                  ) -> RoutingConfig:
        """The config from parsed data.

        Raises:
            ConfigError: one line saying what is wrong and where.
        """
        try:
            return cls.model_validate(dict(data))
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(p) for p in first["loc"])
            message = first["msg"].removeprefix("Value error, ")
            raise ConfigError(f"{where}: {loc + ': ' if loc else ''}{message}") from None

    @classmethod
    def load(cls, path: str | Path) -> RoutingConfig:
        """Read a TOML routing file.

        Raises:
            ConfigError: the file cannot be read, is not TOML, or does not check.
        """
        path = Path(path)
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"cannot read the routing config {path}: "
                              f"{exc.strerror or exc}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not TOML: {exc}") from None
        return cls.from_dict(data, where=str(path))


@dataclass(frozen=True, slots=True)
class Readiness:
    """What :meth:`Router.check` found for one role.

    Attributes:
        role, profile, endpoint, base_url, model: what was probed.
        ready: the backend answers for the model.
        code: ``ok``, ``model_not_listed``, ``config`` (the client could not be made, e.g.
            its key variable is unset) or a :class:`ClientError` code.
        detail: one line for a person.
    """

    role: str
    profile: str
    endpoint: str
    base_url: str
    model: str
    ready: bool
    code: str
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"role": self.role, "profile": self.profile, "endpoint": self.endpoint,
                "base_url": self.base_url, "model": self.model, "ready": self.ready,
                "code": self.code, "detail": self.detail}


ClientFactory = Callable[[Endpoint, Profile], LLMClient]


def chat_client(endpoint: Endpoint, profile: Profile) -> ChatClient:
    """The :class:`ChatClient` for a profile on its endpoint."""
    retry = profile.retry or endpoint.retry
    return ChatClient(
        endpoint.base_url, profile.model, api_key_env=endpoint.api_key_env,
        connect_timeout_s=endpoint.connect_timeout_s, idle_timeout_s=endpoint.idle_timeout_s,
        total_timeout_s=endpoint.total_timeout_s, max_retries=retry.max_retries,
        backoff_s=retry.backoff_s, max_backoff_s=retry.max_backoff_s,
        max_retry_after_s=retry.max_retry_after_s, extra_body=profile.extra_body,
    )


class Router:
    """Clients by role, from a :class:`RoutingConfig`. Thread-safe.

    Args:
        config: the endpoints, profiles and roles.
        make_client: makes the client of a profile (default: a :class:`ChatClient`);
            called once per profile, on first use.
    """

    def __init__(self, config: RoutingConfig, *,
                 make_client: ClientFactory | None = None) -> None:
        self.config = config
        self._make = make_client or chat_client
        self._roles = dict(config.roles)
        self._clients: dict[str, LLMClient] = {}
        self._lock = threading.Lock()

    @classmethod
    def load(cls, path: str | Path, **options: Any) -> Router:
        return cls(RoutingConfig.load(path), **options)

    @property
    def roles(self) -> dict[str, str]:
        """Role -> profile, as of now."""
        with self._lock:
            return dict(self._roles)

    def profile_of(self, role: str) -> str:
        """The profile serving ``role`` now.

        Raises:
            ConfigError: the role is not mapped.
        """
        with self._lock:
            profile = self._roles.get(role)
        if profile is None:
            mapped = ", ".join(sorted(self._roles)) or "none"
            raise ConfigError(f"no profile serves the role {role!r} (roles: {mapped})")
        return profile

    def switch(self, role: str, profile: str) -> str | None:
        """Serve ``role`` with ``profile`` from its next request on; returns the profile
        it had (``None``: it was not mapped). A request under way finishes where it began.

        Raises:
            ConfigError: no such profile.
        """
        if profile not in self.config.profiles:
            raise ConfigError(f"no profile is named {profile!r} (profiles: "
                              f"{', '.join(sorted(self.config.profiles))})")
        with self._lock:
            old = self._roles.get(role)
            self._roles[role] = profile
        return old

    def client_for_profile(self, profile: str) -> LLMClient:
        """The client of ``profile`` (made on first use, then shared).

        Raises:
            ConfigError: no such profile, or its client cannot be made (an unset key
                variable, say).
        """
        with self._lock:
            client = self._clients.get(profile)
            if client is not None:
                return client
            spec = self.config.profiles.get(profile)
            if spec is None:
                raise ConfigError(f"no profile is named {profile!r}")
            client = self._make(self.config.endpoints[spec.endpoint], spec)
            self._clients[profile] = client
            return client

    def client(self, role: str) -> RoleClient:
        """The role's client: each request goes to the profile the role maps to then.

        Raises:
            ConfigError: the role is not mapped.
        """
        self.profile_of(role)
        return RoleClient(self, role)

    def check(self, roles: Sequence[str] | None = None) -> list[Readiness]:
        """Probe the backend of each role (all mapped roles unless given), once each."""
        found = []
        for role in (roles if roles is not None else sorted(self.roles)):
            name = self.profile_of(role)
            profile = self.config.profiles[name]
            endpoint = self.config.endpoints[profile.endpoint]
            base = (role, name, profile.endpoint, endpoint.base_url, profile.model)
            try:
                client = self.client_for_profile(name)
            except ConfigError as exc:
                found.append(Readiness(*base, False, "config", str(exc)))
                continue
            probe = getattr(client, "probe", None)
            if probe is None:
                found.append(Readiness(*base, True, "ok", "this client needs no server"))
                continue
            ready, code, detail = probe()
            found.append(Readiness(*base, ready, code, detail))
        return found

    def close(self) -> None:
        """Close every client made."""
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            close = getattr(client, "close", None)
            if close is not None:
                close()

    def __enter__(self) -> Router:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RoleClient:
    """The :class:`LLMClient` of one role: every request goes to the profile its
    :class:`Router` maps the role to at that moment.

    ``profile`` and ``model`` say where the next request goes; a reply records where it
    came from in ``Reply.model`` (the server's word) and the Programmer's events.
    """

    def __init__(self, router: Router, role: str) -> None:
        self.router = router
        self.role = role

    @property
    def profile(self) -> str:
        return self.router.profile_of(self.role)

    @property
    def model(self) -> str:  # type: ignore[override]
        return self.router.config.profiles[self.profile].model

    def _target(self) -> tuple[LLMClient, Profile]:
        name = self.profile
        return self.router.client_for_profile(name), self.router.config.profiles[name]

    def complete(self, messages: Sequence[Message], *, max_tokens: int | None = None,
                 temperature: float | None = None, cancel: CancelToken | None = None
                 ) -> Reply:
        """The profile's client's reply; ``cancel`` is handed on to a client that takes
        it (one that does not is left to finish)."""
        client, profile = self._target()
        options: dict[str, Any] = {"max_tokens": max_tokens or profile.max_tokens,
                                   "temperature": _pick(temperature, profile.temperature)}
        if cancel is not None and _takes_cancel(client.complete):
            options["cancel"] = cancel
        return client.complete(messages, **options)

    def stream(self, messages: Sequence[Message], *, max_tokens: int | None = None,
               temperature: float | None = None) -> Iterator[Delta]:
        client, profile = self._target()
        return client.stream(messages, max_tokens=max_tokens or profile.max_tokens,
                             temperature=_pick(temperature, profile.temperature))

    def probe(self) -> tuple[bool, str, str]:
        (readiness,) = self.router.check([self.role])
        return readiness.ready, readiness.code, readiness.detail

    def __repr__(self) -> str:
        return f"RoleClient(role={self.role!r}, profile={self.profile!r})"


def _pick(given: float | None, default: float | None) -> float | None:
    return default if given is None else given
