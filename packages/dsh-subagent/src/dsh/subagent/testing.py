"""Test helpers shipped with the seam: a scripted provider and the provider conformance suite.

``FakeProvider`` runs no process; ``run_provider_conformance`` checks any provider (the product
providers run it against the real products) and raises ``AssertionError`` naming each violation.
"""

from dsh.subagent._conformance import ConformanceReport, run_provider_conformance
from dsh.subagent._fake import FakeProvider, FakeRun

__all__ = ["ConformanceReport", "FakeProvider", "FakeRun", "run_provider_conformance"]
