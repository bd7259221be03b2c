"""The rules that keep the store's machinery inside `bot/store/` decide right
on sample code (not the repo: `make lint` checks that): the lint rule for
`wait=` and `is_sqlite` (`tests.store_boundary`) and import-linter's contract
on the store's internals (pyproject.toml), run on a sample package."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.paths import REPO_ROOT
from tests.store_boundary import check_source, check_tree

HELD_BACK = """\
async def save(session, statement, params):
    await execute(session, statement, params,
                  wait=False)
"""


def test_a_held_back_write_outside_the_store_is_named_by_file_and_line() -> None:
    (finding,) = check_source("bot/pipeline/new_feature.py", HELD_BACK)
    assert (finding.path, finding.line, finding.rule) == ("bot/pipeline/new_feature.py", 3, "wait")
    assert str(finding).startswith("bot/pipeline/new_feature.py:3: `wait=`")
    assert "storage operation of bot/store" in str(finding)


def test_asking_which_database_runs_outside_the_store_is_named() -> None:
    source = "def pick(store):\n    return 1 if store.is_sqlite else 2\n"
    (finding,) = check_source("bot/accounts/new_feature.py", source)
    assert (finding.line, finding.rule) == (2, "is_sqlite")
    assert "inside a storage operation" in str(finding)


def test_the_store_itself_and_apschedulers_shutdown_are_allowed() -> None:
    assert check_source("bot/store/new_op.py", HELD_BACK + "x = store.is_sqlite\n") == []
    assert (
        check_source("bot/scheduling/s.py", "def stop(aps):\n    aps.shutdown(wait=False)\n") == []
    )


def test_the_tree_check_fails_on_a_violation_and_on_a_stale_allowance(tmp_path: Path) -> None:
    (tmp_path / "bot" / "pipeline").mkdir(parents=True)
    (tmp_path / "bot" / "pipeline" / "new_feature.py").write_text(HELD_BACK, encoding="utf-8")
    problems = check_tree(tmp_path, frozenset())
    assert problems == [
        "bot/pipeline/new_feature.py:3: `wait=` (a held-back write) outside bot/store: "
        "add or call a named storage operation of bot/store that holds its writes back itself"
    ]
    allowed = frozenset({("bot/pipeline/new_feature.py", "wait")})
    assert check_tree(tmp_path, allowed) == []
    stale = frozenset({("bot/pipeline/gone.py", "is_sqlite")})
    assert check_tree(tmp_path / "nothing", stale) == [
        "bot/pipeline/gone.py: no `is_sqlite` left: remove it from ALLOWED in tests.store_boundary"
    ]


CONTRACT = "bot.store keeps its machinery to itself"


def _contract() -> dict[str, object]:
    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    (contract,) = [c for c in config["tool"]["importlinter"]["contracts"] if c["name"] == CONTRACT]
    return dict(contract)


def _sample(root: Path, contract: dict[str, object], feature: str) -> None:
    """A package `sample_bot` with every module the contract names, the store's
    public `leases` importing its rows, and `sample_bot.pipeline.feature`."""
    names = [*contract["source_modules"], *contract["forbidden_modules"], "bot.store.leases"]  # type: ignore[misc]
    for name in names:  # each a package: `__init__.py` makes it importable either way
        parts = ["sample_bot", *name.split(".")[1:]]
        for n in range(1, len(parts) + 1):
            package = root.joinpath(*parts[:n])
            package.mkdir(exist_ok=True)
            (package / "__init__.py").touch()
    (root / "sample_bot" / "store" / "leases" / "__init__.py").write_text(
        "from sample_bot.store import rows\n", encoding="utf-8"
    )
    (root / "sample_bot" / "pipeline" / "feature.py").write_text(feature, encoding="utf-8")


def _lint(root: Path, contract: dict[str, object]) -> subprocess.CompletedProcess[str]:
    def renamed(names: object) -> list[str]:
        return [f'"sample_{name}"' for name in names]  # type: ignore[attr-defined]

    (root / "contracts.toml").write_text(
        "[tool.importlinter]\n"
        'root_packages = ["sample_bot"]\n'
        "[[tool.importlinter.contracts]]\n"
        f'name = "{CONTRACT}"\n'
        'type = "forbidden"\n'
        f"source_modules = [{', '.join(renamed(contract['source_modules']))}]\n"
        f"forbidden_modules = [{', '.join(renamed(contract['forbidden_modules']))}]\n"
        f"allow_indirect_imports = {str(contract['allow_indirect_imports']).lower()}\n",
        encoding="utf-8",
    )
    lint_imports = Path(sys.executable).with_name("lint-imports")
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(lint_imports), "--config", "contracts.toml", "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_import_contract_breaks_on_a_pipeline_module_that_imports_rows(
    tmp_path: Path,
) -> None:
    contract = _contract()
    _sample(tmp_path, contract, "from sample_bot.store.rows import execute\n")
    result = _lint(tmp_path, contract)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "sample_bot.pipeline.feature -> sample_bot.store.rows" in result.stdout


def test_the_import_contract_keeps_a_pipeline_module_that_asks_the_store(
    tmp_path: Path,
) -> None:
    contract = _contract()
    _sample(tmp_path, contract, "from sample_bot.store import leases\n")
    result = _lint(tmp_path, contract)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "KEPT" in result.stdout
