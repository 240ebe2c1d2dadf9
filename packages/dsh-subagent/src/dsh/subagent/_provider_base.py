"""``ProviderBase`` and ``ProductInstall``: the config-only half every product provider shares.

Both product providers are built from a ``ProviderConfigBase`` subclass the same way (the
registry calls ``from_config(mapping)``), are named by ``provider_name`` and answer ``dsh
doctor`` with the same four kinds of row: the pinned distribution's version, whether the
product's executable is there, the isolation mode, and the credential sources (variable
names, a login file under the product's config dir). What differs is data
(``ProductInstall``) and two hooks a provider defines: ``forwarded_env_names`` and
``start``. The spawn layer is not imported here (the seam does not depend on it), so the
credential names come from the provider.
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

__all__ = ["ProductInstall", "ProviderBase", "isolation_check"]

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
        private = config.isolation == "private"
        # Under private isolation the product never sees the user's login file: each run's
        # home starts from the template (if any) and the forwarded credentials only.
        login_files = [] if private else [self.login_path(config, ambient)]
        credentials = credential_checks(credential_names, login_files)
        if private:
            credentials[1] = DoctorCheck("login file", "not used (private home per run)", True)
        return [
            version_check(self.version_label, self.distribution),
            payload_check(self.payload_label, self.locate_payload),
            isolation_check(config),
            *credentials,
        ]


def isolation_check(config: ProviderConfigBase) -> DoctorCheck:
    """The instance's isolation mode; for ``private``, whether a ``home_template`` is set (the
    row shows no path)."""
    if config.isolation != "private":
        return DoctorCheck("isolation", "native", True)
    template = "template set" if config.home_template is not None else "no template"
    return DoctorCheck("isolation", f"private ({template})", True)


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
        """``dsh doctor`` rows: the pinned version, the payload and this instance's credentials."""
        return self.install.rows(self.config, self.credential_names(os.environ))

    @abc.abstractmethod
    def credential_names(self, environ: Mapping[str, str]) -> Sequence[str]:
        """The credential variable names (never values) this instance forwards from ``environ``."""

    @abc.abstractmethod
    def forwarded_env_names(self) -> tuple[str, ...]:
        """The names (never values) of the env this instance passes on to the product."""
