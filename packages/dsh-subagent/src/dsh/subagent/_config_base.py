"""``ProviderConfigBase``: the fields and checks every product provider config shares.

Both product configs forward env the same way (through ``dsh.subprocess``'s forwarding rules),
dispose a tree with the same grace ladder and run it at the same niceness, and name the instance
and its model with the same rules, so those fields, their defaults and their checks live here
once. A provider subclass gives ``provider_name`` its default (``provider_name: str = "codex"``:
the checks here still apply to the redeclared field), its ``credential_env`` default and its
product-specific fields.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import ClassVar, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from dsh.subagent._env_config import check_env_names, check_env_overlay

__all__ = [
    "ISOLATION_MODES",
    "MAX_GRACE_MS",
    "MAX_PREWARM",
    "EnvPolicy",
    "Isolation",
    "ProviderConfigBase",
    "RunLimits",
]

# The seam does not depend on dsh.subprocess (dsh-subagent's only requirement is pydantic), so the
# two spawn-layer facts the config checks are restated here; tests-e2e/test_provider_config_base.py
# fails if they ever differ from dsh.subprocess's ``MAX_GRACE_MS`` and ``ENV_POLICIES``.
MAX_GRACE_MS = 2_147_483_647
"""The longest ``dispose_grace_ms`` (``SpawnSpec.grace_ms``'s bound in dsh.subprocess)."""

_MAX_NICE = 19
"""The largest ``nice`` (``SpawnSpec.nice``'s bound in dsh.subprocess)."""

MAX_PREWARM = 16
"""The most warm product processes one provider instance keeps (``prewarm``)."""

EnvPolicy = Literal["scrub", "core"]
"""The env policies of ``dsh.subprocess`` (``scrub`` or ``core``)."""

Isolation = Literal["native", "private"]
"""``native``: the product reads the deployment user's own setup; ``private``: a per-run home."""
ISOLATION_MODES: tuple[Isolation, ...] = ("native", "private")


_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*", re.IGNORECASE)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


class RunLimits(BaseModel):
    """``limits = { memory = "4G", tasks = 512, cpu = 1.5 }``: bounds for a run's whole tree,
    enforced by dsh.subprocess's kernel layer (a cgroup per run)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    memory: int | None = Field(default=None, ge=4 << 20)
    """Bytes, or a size with a binary unit (``"512M"``, ``"4G"``, ``"1.5GiB"``); at least 4M."""
    tasks: int | None = Field(default=None, ge=1, le=4_194_304, strict=True)
    """Processes and threads the tree may hold at once."""
    cpu: float | None = Field(default=None, ge=0.01, le=1024)
    """CPUs' worth of time per period (``1.5``: one and a half CPUs)."""

    @field_validator("memory", mode="before")
    @classmethod
    def _size(cls, value: object) -> object:
        if isinstance(value, str):
            match = _SIZE.fullmatch(value)
            if match is None:
                raise ValueError('must be bytes or a size such as "512M" or "4G"')
            return int(float(match.group(1)) * _UNITS[match.group(2).upper()])
        if isinstance(value, bool) or (value is not None and not isinstance(value, int)):
            raise ValueError('must be bytes or a size such as "512M" or "4G"')
        return value


class ProviderConfigBase(BaseModel):
    """The shared part of a provider instance's config (snake_case, frozen, no unknown fields)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    provider_name: str = "provider"
    """The instance's name; must not be blank. Each product subclass gives its own default."""
    model: str | None = None
    """The product's model; ``None`` keeps the product's own choice. Must not be blank when set."""
    env: dict[str, str] = Field(default_factory=dict)
    """Variables set in the product's env after forwarding, checked so ``execve`` takes them."""
    inherit_env: tuple[str, ...] = ()
    """Ambient names forwarded when set, beyond ``credential_env``."""
    credential_env: tuple[str, ...] = ()
    """Ambient credential names forwarded when set; ``[]`` forwards none. Tools never see them."""
    env_policy: EnvPolicy = "scrub"
    """``scrub`` (ambient env minus credentials) or ``core`` (an allow-list; see dsh.subprocess)."""
    tool_env: tuple[str, ...] = ()
    """Forwarded names that the product's tool commands may still see (the others are hidden)."""
    dispose_grace_ms: float = Field(default=3000.0, gt=0, le=MAX_GRACE_MS)
    """SIGTERM-to-SIGKILL grace when the tree is disposed (``SpawnSpec.grace_ms``)."""
    stderr: Literal["forward", "discard"] = "forward"
    nice: int | Literal["auto"] | None = "auto"
    """The product tree's CPU niceness (see ``SpawnSpec.nice``): ``auto`` (full priority while
    few runs are in flight, 10 under contention), 0 to 19, or None to keep the harness's."""
    prewarm: int = Field(default=0, ge=0, le=MAX_PREWARM, strict=True)
    """Warm product processes kept spawned and initialised for the next delegations (0: none)."""
    isolation: Isolation = "native"
    """``native`` (the product reads the user's own setup) or ``private`` (a fresh home per run
    and per warm process, removed after whole-tree exit; see docs/profiles.md)."""
    home_template: str | None = None
    """Under ``private``: an absolute directory copied (never linked) into each private home."""

    private_home_env: ClassVar[tuple[str, ...]] = ()
    """The names a private home sets (a subclass lists its product's); ``env`` and
    ``inherit_env`` must not name them under ``private``: the private home would silently win."""
    limits: RunLimits | None = None
    """Memory, task and CPU bounds for each run's whole tree (the kernel layer). Where the
    machine cannot enforce one, a run fails before spawning, unless ``limits_best_effort``."""
    limits_best_effort: bool = False
    """Run without the limits the machine cannot enforce, instead of failing."""

    @field_validator("nice", mode="before")
    @classmethod
    def _check_nice(cls, value: object) -> object:
        # One check with one message, rather than one error per branch of the union.
        if value is None or value == "auto":
            return value
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_NICE:
            raise ValueError("nice must be an integer from 0 to 19, 'auto', or null")
        return value

    @field_validator("provider_name")
    @classmethod
    def _name_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("provider_name must not be blank")
        return value

    @field_validator("model")
    @classmethod
    def _model_not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("model must not be blank when set")
        return value

    @field_validator("env")
    @classmethod
    def _env_valid(cls, value: dict[str, str]) -> dict[str, str]:
        check_env_overlay(value)
        return value

    @field_validator("inherit_env", "credential_env", "tool_env")
    @classmethod
    def _names_valid(cls, value: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        check_env_names(value, info.field_name or "inherit_env")
        return value

    @field_validator("home_template")
    @classmethod
    def _template_valid(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not value.strip() or not Path(value).is_absolute():
            raise ValueError("home_template must be an absolute directory path")
        if not Path(value).is_dir():
            raise ValueError("home_template must name an existing directory")
        return value

    @model_validator(mode="after")
    def _isolation_consistent(self) -> Self:
        if self.isolation != "private":
            if self.home_template is not None:
                raise ValueError('home_template needs isolation = "private"')
            return self
        for field_name, names in (("env", set(self.env)), ("inherit_env", set(self.inherit_env))):
            clash = sorted(names & set(self.private_home_env))
            if clash:
                raise ValueError(
                    f'{field_name} must not set {", ".join(clash)} under isolation = "private"'
                    " (the private home sets it)"
                )
        return self
