"""Owned dirs ``dsh-relay-<pid>-<start>-<random>``: a private ``HOME`` per process.

Only under ``isolation = "private"``: the dir is made (with the ``home_template``'s copy) before
the spawn and handed to it as ``owned_dir``, so it goes after whole-tree exit; the provider's
first start in a process sweeps the ones dead owners left (the kit, by ``PRIVATE_DIR_TAG``).
"""

from __future__ import annotations

import shutil

from dsh.subagent.kit import copy_home_template, make_off_loop, make_owned_dir
from dsh.subagent_relay.config import RelayProviderConfig

__all__ = ["PRIVATE_DIR_TAG", "make_private_home"]

PRIVATE_DIR_TAG = "relay"


def _make(config: RelayProviderConfig) -> str:
    path = make_owned_dir(PRIVATE_DIR_TAG)
    try:
        copy_home_template(config.home_template, path)
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise
    return path


async def make_private_home(config: RelayProviderConfig) -> str | None:
    """A fresh private home under ``private`` (made off the loop), else ``None``."""
    if config.isolation != "private":
        return None
    return await make_off_loop(lambda: _make(config), lambda path: path)
