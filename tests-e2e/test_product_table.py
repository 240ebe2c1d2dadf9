"""The one product table (``KNOWN_PROVIDERS``) is the source of every per-product list.

Generated from it (``tools/product_table.py``): the import contracts that name products in
``pyproject.toml`` and ``.ci/products.sh``, which ``.ci/install-matrix`` loops over. Checked
against it here: the workspace's sources, dev group and type-checking paths, the provider docs
pages and the docs map.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import product_table

from dsh.tool_subagent._known_providers import KNOWN_PROVIDERS

ROOT = Path(__file__).resolve().parents[1]


def test_the_generated_files_are_current() -> None:
    assert product_table.check() == [], f"run {product_table.REGENERATE_COMMAND}"


def test_a_new_row_grows_every_generated_list(tmp_path: Path) -> None:
    third = KNOWN_PROVIDERS[0]._replace(
        kind="gemini",
        product="Gemini CLI",
        extra="gemini",
        package="dsh.subagent_gemini",
        vendor="google",
        distribution="dsh-subagent-gemini",
        product_module="gemini_cli_bin",
        product_distribution="gemini-cli-bin",
    )
    table = (*KNOWN_PROVIDERS, third)
    contracts = product_table.contracts(table)
    assert '"dsh.subagent_gemini | dsh.subagent_codex' not in contracts  # table order kept
    assert "dsh.subagent_codex | dsh.subagent_claude_code | dsh.subagent_gemini" in contracts
    assert 'id = "products-own-package-gemini"' in contracts
    parsed = tomllib.loads(contracts)["tool"]["importlinter"]
    by_id = {contract["id"]: contract for contract in parsed["contracts"]}
    assert by_id["products-own-package-codex"]["forbidden_modules"] == [
        "claude_agent_sdk",
        "gemini_cli_bin",
    ]
    assert "gemini_cli_bin" in by_id["tool-imports-no-product"]["forbidden_modules"]
    assert "dsh.subagent_gemini" in by_id["seam-names-no-product"]["forbidden_modules"]
    shell = product_table.products_sh(table)
    assert "PRODUCT_EXTRAS=(codex claude-code gemini)" in shell
    assert '[gemini]="dsh-subagent-gemini gemini-cli-bin"' in shell


def test_the_workspace_names_every_provider() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    sources = pyproject["tool"]["uv"]["sources"]
    dev = pyproject["dependency-groups"]["dev"]
    paths = pyproject["tool"]["mypy"]["mypy_path"]
    for known in KNOWN_PROVIDERS:
        assert known.distribution in sources
        assert known.distribution in dev
        assert f"packages/{known.distribution}/src" in paths
        assert (ROOT / "packages" / known.distribution / "pyproject.toml").is_file()


def test_every_provider_has_its_docs_page_on_the_map() -> None:
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    for known in KNOWN_PROVIDERS:
        page = f"{known.distribution}.md"
        assert (ROOT / "docs" / page).is_file()
        assert f"]({page})" in index
