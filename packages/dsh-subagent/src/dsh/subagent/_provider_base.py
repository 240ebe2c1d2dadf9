"""``ProviderBase`` and ``ProductInstall``: the config-only half every product provider shares.

Both product providers are built from a ``ProviderConfigBase`` subclass the same way (the
registry calls ``from_config(mapping)``), are named by ``provider_name`` and answer ``dsh
doctor`` with the same three kinds of row: the pinned distribution's version, whether the
product's executable is there, and the credential sources (variable names, a login file under
the product's config dir). What differs is data (``ProductInstall``) and two hooks a provider
defines: ``forwarded_env_names`` and ``start``. The spawn layer is not imported here (the seam
does not depend on it), so the credential names come from the provider.
"""

from __future__ import annotations

import abc
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, Self, TypeVar, cast

from dsh.subagent._config_base import ProviderConfigBase
from dsh.subagent._doctor import DoctorCheck, credential_checks, payload_check, version_check
from dsh.subagent._types import NO_START_CAPABILITIES, Capabilities

__all__ = ["ProductInstall", "ProviderBase"]

ConfigT = TypeVar("ConfigT", bound=ProviderConfigBase)


@dataclass(frozen=True)
class ProductInstall:
    """What ``dsh doctor`` checks for one product, and where its login file lives.

    The login file is ``<config dir>/<login_file>``: the config dir is ``config_dir_env`` from
    the config's ``env``, else from the ambient env, else ``$HOME/<default_config_dir>`` (the
    config's ``HOME`` first).
    """

    version_label: str
    distribution: str
    payload_label: str
    locate_payload: Callable[[], str | os.PathLike[str]]
    """Returns the product's executable; may raise (reported as missing, never propagated)."""
    config_dir_env: str
    default_config_dir: str
    login_file: str
    login_env: tuple[str, ...] = ()
    """The key variables the product authenticates with (named in the login hint)."""
    login_command: str = ""
    """The product's own login command (named in the login hint), e.g. ``codex login``."""

    def login_path(self, config: ProviderConfigBase, environ: Mapping[str, str]) -> Path:
        """Where this instance's product looks for its login file."""
        configured = config.env.get(self.config_dir_env) or environ.get(self.config_dir_env)
        if configured:
            return Path(configured) / self.login_file
        home = Path(config.env.get("HOME") or Path.home())
        return home / self.default_config_dir / self.login_file

    def rows(
        self,
        config: ProviderConfigBase,
        credential_names: Sequence[str],
        environ: Mapping[str, str] | None = None,
    ) -> list[DoctorCheck]:
        """The version, payload and credential rows (names and "exists / absent" only)."""
        ambient: Mapping[str, str] = os.environ if environ is None else environ
        return [
            version_check(self.version_label, self.distribution),
            payload_check(self.payload_label, self.locate_payload),
            *credential_checks(credential_names, [self.login_path(config, ambient)]),
        ]


class ProviderBase(abc.ABC, Generic[ConfigT]):
    """A product provider's config half: construction, ``from_config``, ``name``, ``doctor()``.

    A subclass sets ``config_class`` and ``install``, and defines ``credential_names`` (the
    ambient credential names its product will see), ``forwarded_env_names`` and ``start``.
    Building one starts no process and does no PATH lookup.
    """

    config_class: ClassVar[type[ProviderConfigBase]]
    install: ClassVar[ProductInstall]
    capabilities: Capabilities = NO_START_CAPABILITIES
    inherits_parent_context: bool = False

    def __init__(self, config: ConfigT | None = None) -> None:
        if config is None:
            config = cast(ConfigT, self.config_class.model_validate({}))
        self.config: ConfigT = config

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Self:
        """Build from a plain mapping (entry-point loading), validated by ``config_class``."""
        return cls(cast(ConfigT, cls.config_class.model_validate(dict(config))))

    @property
    def name(self) -> str:
        return self.config.provider_name

    def doctor(self) -> list[DoctorCheck]:
        """``dsh doctor`` rows: the pinned version, the payload and this instance's credentials.

        When this instance finds no credential at all, one more row says how to log in.
        """
        rows = self.install.rows(self.config, self.credential_names(os.environ))
        hint = self.login_hint(os.environ)
        if hint:
            rows.append(DoctorCheck("how to log in", hint, True))
        return rows

    def login_hint(self, environ: Mapping[str, str] | None = None) -> str:
        """One line naming what would authenticate this instance, or ``""`` when it has a source.

        A source is a forwarded credential variable with a non-empty value (an endpoint,
        ``*_BASE_URL``, is none) or the product's login file. Names only, never a value or a
        path; for the host, never for a model (a model provider that needs no key, set up in the
        product's own config, is not seen here).
        """
        ambient: Mapping[str, str] = os.environ if environ is None else environ
        env = self.config.env
        for name in self.credential_names(ambient):
            if name.upper().endswith("_BASE_URL"):
                continue
            if env[name] if name in env else ambient.get(name):
                return ""
        if self.install.login_path(self.config, ambient).is_file():
            return ""
        install = self.install
        ways = []
        if install.login_env:
            names = " or ".join(install.login_env)
            ways.append(f"set {names} in the environment (forwarded by default)")
        if install.login_command:
            ways.append(f"log in once with `{install.login_command}`")
        if not ways:
            return ""
        return f'provider "{self.name}" found no credentials: ' + ", or ".join(ways)

    @abc.abstractmethod
    def credential_names(self, environ: Mapping[str, str]) -> Sequence[str]:
        """The credential variable names (never values) this instance forwards from ``environ``."""

    @abc.abstractmethod
    def forwarded_env_names(self) -> tuple[str, ...]:
        """The names (never values) of the env this instance passes on to the product."""
