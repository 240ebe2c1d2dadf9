"""dsh.subagent_relay: the Relay provider for ``dsh.subagent`` (a stand-in, kept in the tests).

Runs ``relay-agent`` (the pinned product's executable) through ``dsh.subprocess``, one process
per task. The loopback model fixture lives in :mod:`dsh.subagent_relay.testing`.
"""

from importlib import metadata as _metadata

from dsh.subagent_relay._provider import RelayProvider
from dsh.subagent_relay._run import RelayRun
from dsh.subagent_relay.config import RELAY_CREDENTIAL_ENV, RelayProviderConfig

try:
    __version__ = _metadata.version("dsh-subagent-relay")
except _metadata.PackageNotFoundError:  # imported from a source tree that is not installed
    __version__ = "0+unknown"

__all__ = ["RELAY_CREDENTIAL_ENV", "RelayProvider", "RelayProviderConfig", "RelayRun"]
