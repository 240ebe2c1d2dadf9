"""A third product is one package and one row of the product table (issue 41).

``tests-e2e/third_provider`` holds ``dsh-subagent-relay``, a provider written from
docs/adding-a-provider.md for a scripted stand-in product (``relay-agent``, a stdlib script that
asks a loopback model server). This test installs it the way pip would leave it for entry-point
discovery (its ``.dist-info`` and the product's, in a temporary directory on ``PYTHONPATH``),
applies the page's one step outside the package to a copy of the product table (the Relay row in
``KNOWN_PROVIDERS``), and runs, in a pytest process of their own that sees both:

- the package's own conformance test (the kit's eleven checks);
- the end-to-end tests that follow the product table: the test hooks of every product's
  ``testing`` module, ``dsh doctor`` (every product healthy), ``dsh mcp``'s tools/list through
  the SDK's client (a delegation tool naming each product) and ``dsh demo`` (the product's four
  scenarios, and the notes naming the table's missing products).

The diff-stat of that one step is computed here and must be the one docs/adding-a-provider.md
states.
"""

from __future__ import annotations

import difflib
import os
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from dsh.subagent.testing import write_distribution
from dsh.subprocess import Collect, SpawnSpec, default_runtime
from dsh.subprocess.testing import pytest_argv

pytestmark = [pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tests-e2e" / "third_provider"
TABLE = ROOT / "packages" / "dsh-tool-subagent" / "src" / "dsh" / "tool_subagent"
TABLE = TABLE / "_known_providers.py"
TABLE_MODULE = "dsh.tool_subagent._known_providers"
PAGE = ROOT / "docs" / "adding-a-provider.md"

#: The row the page's step "The product table" adds, as it would be written into the file.
ROW = """\
    KnownProvider(
        kind="relay",
        product="Relay",
        extra="relay",
        package="dsh.subagent_relay",
        vendor="relay",
        distribution="dsh-subagent-relay",
        product_module="relay_agent",
        product_distribution="relay-agent",
        pulls_mcp=False,
    ),
"""

#: What runs with the third product installed and its row in the table.
SUITES = (
    "tests-e2e/third_provider/tests/test_conformance.py",
    "tests-e2e/test_provider_test_hooks.py",
    "tests-e2e/test_doctor.py::test_doctor_reports_every_product_of_the_table_healthy",
    "tests-e2e/test_mcp_real.py::test_the_default_profile_serves_one_delegation_tool_per_product",
    "tests-e2e/test_demo.py::test_demo_names_the_extras_to_install_and_fails_with_no_provider",
    "tests-e2e/test_demo.py::test_partial_install_runs_the_installed_one_and_names_the_others[relay]",
)
#: The cases that exist only because the table has the Relay row.
RELAY_CASES = {
    "test_the_shared_hooks_are_exported[relay]",
    "test_make_start_request_is_the_same_in_all[relay]",
    "test_provider_with_program_takes_config_then_program[relay]",
    "test_partial_install_runs_the_installed_one_and_names_the_others[relay]",
}

#: Loads the edited copy of the table in place of the module (every importer then sees it).
_SITECUSTOMIZE = f"""\
import importlib.abc
import importlib.util
import sys
from pathlib import Path

_EDITED = str(Path(__file__).with_name("_known_providers.py"))


class _EditedTable(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == {TABLE_MODULE!r}:
            return importlib.util.spec_from_file_location(name, _EDITED)
        return None


sys.meta_path.insert(0, _EditedTable())
"""


def edited_table() -> str:
    """``_known_providers.py`` with the Relay row added last to ``KNOWN_PROVIDERS``."""
    source = TABLE.read_text(encoding="utf-8")
    start = source.index("KNOWN_PROVIDERS = (\n")
    end = source.index("\n)\n", start) + 1
    return source[:end] + ROW + source[end:]


def diff_stat(path: Path, before: str, after: str) -> str:
    """``git diff --stat``'s lines for one file."""
    lines = difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="")
    changed = [line for line in lines if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    added = sum(line.startswith("+") for line in changed)
    removed = len(changed) - added
    counts = [f"{added} insertion{'s' * (added != 1)}(+)"] * bool(added)
    counts += [f"{removed} deletion{'s' * (removed != 1)}(-)"] * bool(removed)
    return (
        f" {path.relative_to(ROOT)} | {len(changed)} {'+' * added}{'-' * removed}\n"
        f" 1 file changed, {', '.join(counts)}"
    )


def install(site: Path) -> dict[str, str]:
    """Install the stand-in for processes started with the returned env: the provider's and the
    product's metadata (the provider's entry points from its ``pyproject.toml``, the product at
    its pin) and the edited table, with the package's sources, on ``PYTHONPATH``."""
    project = tomllib.loads((PACKAGE / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    entry_points = "".join(
        f"[{group}]\n" + "".join(f"{name} = {target}\n" for name, target in points.items())
        for group, points in project["entry-points"].items()
    )
    site.mkdir()
    write_distribution(site, project["name"], project["version"], entry_points)
    (pin,) = [dep for dep in project["dependencies"] if dep.startswith("relay-agent==")]
    write_distribution(site, "relay-agent", pin.split("==")[1])
    (site / "_known_providers.py").write_text(edited_table(), encoding="utf-8")
    (site / "sitecustomize.py").write_text(_SITECUSTOMIZE, encoding="utf-8")
    return {"PYTHONPATH": os.pathsep.join([str(site), str(PACKAGE / "src")])}


def test_the_one_change_outside_the_package_is_the_table_row_the_page_states() -> None:
    before = TABLE.read_text(encoding="utf-8")
    stat = diff_stat(TABLE, before, edited_table())
    assert stat == (
        " packages/dsh-tool-subagent/src/dsh/tool_subagent/_known_providers.py | 11 +++++++++++\n"
        " 1 file changed, 11 insertions(+)"
    )
    page = PAGE.read_text(encoding="utf-8")
    assert stat in page, "docs/adding-a-provider.md states another diff-stat"
    assert ROW in page, "docs/adding-a-provider.md shows another row"


async def test_the_third_provider_passes_the_kit_and_shows_on_every_surface(
    tmp_path: Path,
) -> None:
    env = install(tmp_path / "site")
    report = tmp_path / "report.xml"
    spec = SpawnSpec(
        argv=pytest_argv(f"--junitxml={report}", *SUITES),
        cwd=ROOT,
        env={**env, "COLUMNS": "200", "TMPDIR": str(tmp_path)},
        stdout=Collect(1 << 16),
        stderr=Collect(1 << 16),
    )
    async with await default_runtime().spawn(spec) as proc:
        outcome = await proc.wait()
    out = proc.collected("stdout").text + proc.collected("stderr").text
    assert outcome.exit_code == 0, out
    cases = ET.parse(report).getroot().iter("testcase")
    ran = {case.get("name", ""): [child.tag for child in case] for case in cases}
    assert all(tags == [] for tags in ran.values()), out  # none failed, errored or skipped
    assert set(ran) >= RELAY_CASES | {"test_run_provider_conformance"}
    assert len(ran) == 15
