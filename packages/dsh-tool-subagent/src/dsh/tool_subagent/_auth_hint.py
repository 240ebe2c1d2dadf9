"""The stderr hint after an authentication failure: what would authenticate the provider.

Two cases: a credential is set here but not passed on (name it and how to forward it), or the
provider found no credential at all (the provider's ``login_hint()``: the key variables and the
product's own login command). Only for the person at the terminal: the model-visible diagnostic
is never changed. The hint names variables, never a value.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from dsh.subprocess import DSH_ENV_PREFIX, is_credential_env

__all__ = ["AUTH_CATEGORIES", "auth_hint"]

AUTH_CATEGORIES = ("category: authentication", "category: unauthorized")
"""Claude Code's and Codex's authentication failure categories, as the failure line shows them."""
_SHOWN = 3


def auth_hint(provider: Any, failure_text: str, environ: Mapping[str, str] | None = None) -> str:
    """One line naming credential-shaped ambient names the provider does not forward, or ``""``.

    ``provider`` may offer ``forwarded_env_names()`` (both shipped providers do); without it,
    nothing is known to be forwarded.
    """
    if not any(category in failure_text for category in AUTH_CATEGORIES):
        return ""
    ambient: Mapping[str, str] = os.environ if environ is None else environ
    names_of = getattr(provider, "forwarded_env_names", None)
    forwarded = set(names_of()) if callable(names_of) else set()
    missing = sorted(
        name
        for name in ambient
        if is_credential_env(name)
        and name not in forwarded
        and not name.upper().startswith(DSH_ENV_PREFIX)
    )
    if not missing:
        login_hint = getattr(provider, "login_hint", None)
        line = login_hint(ambient) if callable(login_hint) else ""
        return f"dsh run: hint: {line}" if line else ""
    shown = ", ".join(missing[:_SHOWN]) + (
        f" (+{len(missing) - _SHOWN} more)" if len(missing) > _SHOWN else ""
    )
    name = getattr(provider, "name", "?")
    return (
        f"dsh run: hint: {shown} set in this environment but not passed to provider "
        f'"{name}"; to forward one, list it in that provider\'s inherit_env in the profile'
    )
