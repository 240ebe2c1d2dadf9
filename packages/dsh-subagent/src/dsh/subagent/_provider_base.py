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

__all__ = ["ProductInstall", "ProviderBase", "isolation_check", "product_config_dir"]

ConfigT = TypeVar("ConfigT", bound=ProviderConfigBase)


def product_config_dir(
    variable: str, default_dir: str, env: Mapping[str, str | None], environ: Mapping[str, str]
) -> Path:
    """The config dir of a product spawned with the overlay ``env`` over ``environ``.

    ``variable`` (e.g. ``CODEX_HOME``) names it when set, else it is ``$HOME/<default_dir>``;
    the overlay wins over ``environ`` for both, and a ``None`` in it unsets the variable.
    """
    configured = env[variable] if variable in env else environ.get(variable)
    if configured:
        return Path(configured)
    home = env["HOME"] if "HOME" in env else environ.get("HOME")
    return Path(home or Path.home()) / default_dir


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

    def login_path(self, config: ProviderConfigBase, environ: Mapping[str, str]) -> Path | None:
        """Where this instance's product looks for its login file. Under ``private`` isolation
        only the template's copy counts (``None`` without a template): the user's is never read.
        """
        if config.isolation == "private":
            template = config.home_template
            return None if template is None else Path(template) / self.login_file
        home = product_config_dir(self.config_dir_env, self.default_config_dir, config.env, environ)
        return home / self.login_file

    def rows(
        self,
        config: ProviderConfigBase,
        credential_names: Sequence[str],
        environ: Mapping[str, str] | None = None,
    ) -> list[DoctorCheck]:
        """The version, payload and credential rows (names and "exists / absent" only)."""
        ambient: Mapping[str, str] = os.environ if environ is None else environ
        login = self.login_path(config, ambient)
        credentials = credential_checks(credential_names, [] if login is None else [login])
        if config.isolation == "private" and not (login is not None and login.is_file()):
            # The user's login file is never read: each run's home starts from the template.
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
        login = self.install.login_path(self.config, ambient)
        if login is not None and login.is_file():
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
