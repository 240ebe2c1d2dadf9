"""The credential-scrubbed child environment, and the ``core`` allow-list policy.

Two policies decide what of the ambient environment a child starts with:

- ``"scrub"`` (the default): everything except credential-bearing names and values (see
  ``is_credential_env``) and ``DSH_*`` names;
- ``"core"``: only ``CORE_ENV_NAMES``, ``LC_*`` and the caller's ``keep`` names, and even those
  only when their value carries no credential.

Names the caller passes in the overlay always survive: they are deliberate.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

__all__ = [
    "AGENT_SOCKET_NAMES",
    "CORE_ENV_NAMES",
    "CREDENTIAL_VALUE_PATTERN",
    "DSH_ENV_PREFIX",
    "ENV_POLICIES",
    "SCRUB_EXEMPT_NAMES",
    "SENSITIVE_ENV_PATTERN",
    "EnvForwarding",
    "EnvPolicy",
    "ForwardingConfig",
    "build_child_env",
    "is_credential_env",
    "policy_overlay",
    "scrubbed_parent_env",
]

EnvPolicy = Literal["scrub", "core"]
ENV_POLICIES: tuple[EnvPolicy, ...] = ("scrub", "core")

SENSITIVE_ENV_PATTERN: re.Pattern[str] = re.compile(
    r"KEY|PASSW(?:OR)?D|PASSPHRASE|SECRET|TOKEN|CREDENTIAL|JWT|AUTH(?!OR)|COOKIE|PRIVATE"
    r"|(?:^|_)(?:PWD|PAT|HEADERS?)(?:_|$)",
    re.IGNORECASE,
)
"""Credential-bearing name parts. Unanchored on purpose: ``MONKEY_X`` and ``KEYBOARD`` go too.

``PWD``, ``PAT`` and ``HEADER(S)`` count only as a whole ``_``-separated part (``MYSQL_PWD``,
``GH_PAT``; ``OTEL_EXPORTER_OTLP_HEADERS`` and ``ANTHROPIC_CUSTOM_HEADERS`` carry API keys, while
the other ``OTEL_*`` settings stay);
``AUTHOR`` is no ``AUTH``
(``GIT_AUTHOR_NAME``), and ``SCRUB_EXEMPT_NAMES``
keeps the shell's own ``PWD`` / ``OLDPWD``.
"""

SCRUB_EXEMPT_NAMES: frozenset[str] = frozenset({"PWD", "OLDPWD", "XAUTHORITY"})
"""Names the name pattern would match that carry a path, not a credential."""

AGENT_SOCKET_NAMES: frozenset[str] = frozenset({"SSH_AUTH_SOCK", "GPG_AGENT_INFO"})
"""Agent sockets: a credential (the agent signs with every key the user has loaded), so always
scrubbed, whatever the name pattern says; a profile forwards them by name (``inherit_env``)."""

CREDENTIAL_VALUE_PATTERN: re.Pattern[str] = re.compile(
    r"[A-Za-z][A-Za-z0-9+.-]*://[^/?#\s@:]*:[^/?#\s@]+@"  # scheme://user:password@
    r"|https?://[^/?#\s@:]+@"  # https://token@host (a token in the user part)
    r"|-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----"  # a PEM private key
    r"|\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.",  # a JWT (base64url JSON header)
)
"""Credential-bearing values, whatever their name: ``DATABASE_URL=postgres://u:pw@h/db``."""

DSH_ENV_PREFIX = "DSH_"
"""Every ambient name starting with this prefix, in any case, is removed."""

CORE_ENV_NAMES: frozenset[str] = frozenset(
    {
        *("PATH", "HOME", "USER", "LOGNAME", "SHELL", "TMPDIR", "TZ"),
        *("LANG", "LANGUAGE"),
        *(
            name
            for base in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")
            for name in (base, base.lower())
        ),
        *("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"),
        "NODE_EXTRA_CA_CERTS",
    }
)
"""What the ``core`` policy keeps (plus every ``LC_*`` name and the caller's ``keep`` names)."""


def is_credential_env(name: str, value: str = "") -> bool:
    """True if ``name`` or ``value`` looks credential-bearing (the ``scrub`` policy's test)."""
    if name in AGENT_SOCKET_NAMES:
        return True
    if name in SCRUB_EXEMPT_NAMES:
        return CREDENTIAL_VALUE_PATTERN.search(value) is not None
    return (
        SENSITIVE_ENV_PATTERN.search(name) is not None
        or CREDENTIAL_VALUE_PATTERN.search(value) is not None
    )


def _scrubbed(name: str, value: str) -> bool:
    return is_credential_env(name, value) or name[: len(DSH_ENV_PREFIX)].upper() == DSH_ENV_PREFIX


def _core(name: str, keep: frozenset[str]) -> bool:
    return name in CORE_ENV_NAMES or name in keep or name.startswith("LC_")


_last_scrub: tuple[dict[str, str], dict[str, str]] = ({}, {})
"""The last source env and its scrubbed copy: the value patterns cost about 1.5 ms per spawn,
and the source rarely changes between spawns (comparing two dicts is microseconds)."""


def scrubbed_parent_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """A fresh copy of ``environ`` (default ``os.environ``) without credentials or ``DSH_*``."""
    global _last_scrub
    source = dict(os.environ if environ is None else environ)
    seen, scrubbed = _last_scrub
    if source != seen:
        scrubbed = {name: value for name, value in source.items() if not _scrubbed(name, value)}
        _last_scrub = (source, scrubbed)
    return dict(scrubbed)


def policy_overlay(
    policy: EnvPolicy,
    *,
    keep: Iterable[str] = (),
    environ: Mapping[str, str] | None = None,
) -> dict[str, str | None]:
    """Tombstones (``None``) that narrow the scrubbed ambient env to ``policy``.

    Merge the result under a ``SpawnSpec.env`` overlay (the overlay's own names win). ``"scrub"``
    needs no tombstones; ``"core"`` removes every ambient name outside the allow-list.
    """
    if policy not in ENV_POLICIES:
        raise ValueError(f"env policy must be one of {', '.join(ENV_POLICIES)}")
    if policy == "scrub":
        return {}
    kept = frozenset(keep)
    source: Mapping[str, str] = os.environ if environ is None else environ
    return {name: None for name in source if not _core(name, kept)}


def build_child_env(
    overlay: Mapping[str, str | None] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    policy: EnvPolicy = "scrub",
    keep: Iterable[str] = (),
) -> dict[str, str]:
    """The ambient environment under ``policy`` with ``overlay`` merged after it.

    A value of ``None`` in ``overlay`` is a tombstone that removes the name. Names passed here
    deliberately (``OPENAI_API_KEY``, ``DSH_X``) survive.
    """
    env = scrubbed_parent_env(environ)
    for name in policy_overlay(policy, keep=keep, environ=env):
        del env[name]
    for name, value in (overlay or {}).items():
        if not isinstance(name, str):
            raise TypeError("env overlay names must be strings")
        if value is None:
            env.pop(name, None)
        elif isinstance(value, str):
            env[name] = value
        else:
            raise TypeError(f"env overlay value for {name!r} must be a string or None")
    return env


class ForwardingConfig(Protocol):
    """The env fields every product provider config has (``dsh.subagent.kit.ProviderConfigBase``).

    ``EnvForwarding.of`` reads them, so both providers build their forwarding the same way.
    """

    @property
    def env_policy(self) -> EnvPolicy: ...
    @property
    def credential_env(self) -> tuple[str, ...]: ...
    @property
    def inherit_env(self) -> tuple[str, ...]: ...
    @property
    def env(self) -> Mapping[str, str]: ...
    @property
    def tool_env(self) -> tuple[str, ...]: ...


@dataclass(frozen=True)
class EnvForwarding:
    """What a provider passes to its product, and what the product's tool commands must not see.

    ``forward`` names are copied from the ambient env when set (a provider's ``credential_env``
    and ``inherit_env``); ``env`` is the explicit overlay; ``tool_visible`` names are exempt from
    hiding. ``keep`` names survive the ``core`` policy (the product's config dirs).
    """

    policy: EnvPolicy = "scrub"
    keep: tuple[str, ...] = ()
    forward: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    tool_visible: tuple[str, ...] = ()

    @classmethod
    def of(cls, config: ForwardingConfig, keep: tuple[str, ...] = ()) -> EnvForwarding:
        """A provider config's forwarding: ``credential_env`` then ``inherit_env``, then ``env``."""
        return cls(
            policy=config.env_policy,
            keep=keep,
            forward=(*config.credential_env, *config.inherit_env),
            env=config.env,
            tool_visible=config.tool_env,
        )

    def overlay(self, environ: Mapping[str, str] | None = None) -> dict[str, str | None]:
        """Policy tombstones, then the set ``forward`` names, then ``env``: a spawn overlay."""
        ambient: Mapping[str, str] = os.environ if environ is None else environ
        result = policy_overlay(self.policy, keep=self.keep, environ=ambient)
        result.update({name: ambient[name] for name in self.forward if name in ambient})
        result.update(self.env)
        return result

    def names(self, environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
        """The sorted names (never values) the product gets from ``forward`` and ``env``."""
        ambient: Mapping[str, str] = os.environ if environ is None else environ
        return tuple(sorted({n for n in self.forward if n in ambient} | set(self.env)))

    def credential_names(self, environ: Mapping[str, str] | None = None) -> list[str]:
        """``names()`` less the plain ``env`` names: what counts as a credential source."""
        chosen = set(self.forward)
        return [
            name
            for name in self.names(environ)
            if name in chosen or is_credential_env(name, self.env.get(name, ""))
        ]

    def hidden(self) -> list[str]:
        """Sorted names to keep out of tool commands: every ``forward`` name and credential-shaped
        ``env`` name, minus ``tool_visible``."""
        hidden = set(self.forward)
        hidden |= {name for name, value in self.env.items() if is_credential_env(name, value)}
        return sorted(hidden - set(self.tool_visible))
