"""The test tiers keep their shape (tests/tiers.py): a test that starts the
service as a subprocess without the `e2e` marker fails; a test using a fixture
that starts it is marked `e2e` by rule; `make test-fast` runs the rest. And
only the tests whose subject is storage run on both databases
(tests/conftest.py)."""

from __future__ import annotations

import re
import sys
import tomllib

import pytest

from tests.paths import REPO_ROOT
from tests.tiers import E2E, FAST, PERF, SLOW, launches_the_service

pytest_plugins = ("pytester",)

CONFTEST = 'pytest_plugins = ["tests.tiers"]\n'
QUIET = ("-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:asyncio")
"""The inner runs: one process, nothing asynchronous."""


def test_the_markers_are_registered() -> None:
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    markers = pyproject["tool"]["pytest"]["ini_options"]["markers"]
    assert {m.split(":")[0] for m in markers} >= {E2E, SLOW, PERF}


def test_make_test_fast_leaves_out_every_tier() -> None:
    makefile = (REPO_ROOT / "Makefile").read_text(encoding="utf-8")
    (recipe,) = re.findall(r"^test-fast:.*\n\t(.*)$", makefile, re.M)
    assert f'-m "{FAST}"' in recipe, recipe


@pytest.mark.parametrize(
    ("args", "service"),
    [
        ([sys.executable, "-m", "bot", "run"], True),
        (["python", "-m", "bot.cli", "admin", "budget"], True),
        (["/srv/venv/bin/switchboard", "chat"], True),
        ("switchboard db upgrade", True),
        ([sys.executable, "-m", "tests.mcp_servers.box"], False),
        ([sys.executable, "-c", "import bot"], False),
        (["make", "-s", "help"], False),
        ("git", False),
    ],
)
def test_what_counts_as_starting_the_service(args: object, service: bool) -> None:
    assert launches_the_service(args) is service


def test_an_unmarked_test_that_starts_the_service_fails_before_it_starts(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(
        test_sneaky="""
        import subprocess, sys
        import pytest

        def test_unmarked():
            subprocess.run([sys.executable, "-m", "bot", "run"], timeout=1)

        @pytest.mark.e2e
        def test_marked_but_not_starting_it():
            pass
        """
    )
    result = pytester.runpytest_inprocess(*QUIET)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*test_unmarked starts the service as a subprocess*"])
    result.stdout.fnmatch_lines(["*is not marked e2e*"])


def test_a_test_using_a_service_fixture_is_e2e_by_rule(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(
        test_rule="""
        import pytest
        from tests.tiers import starts_the_service

        @pytest.fixture
        @starts_the_service
        def service():
            return "started"

        @pytest.fixture
        def chat(service):
            return service

        def test_directly(service):
            pass

        def test_through_another_fixture(chat):
            pass

        def test_without_it():
            pass
        """
    )
    result = pytester.runpytest_inprocess(*QUIET, "-m", FAST, "-v")
    result.assert_outcomes(passed=1, deselected=2)
    result.stdout.fnmatch_lines(["*test_without_it PASSED*"])


def test_only_storage_tests_run_on_both_databases(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
        import pytest
        from tests.conftest import BACKENDS, pytest_generate_tests

        @pytest.fixture(params=BACKENDS)
        def database(request):
            return request.param

        @pytest.fixture
        def store(database):
            return database
        """
    )
    for where in ("store", "pipeline", "accounts", "scheduling", "web/admin", "adapters", "web"):
        package = pytester.path / "tests" / where
        package.mkdir(parents=True, exist_ok=True)
        name = where.replace("/", "_")
        (package / f"test_{name}.py").write_text(
            f"def test_{name}(store):\n    pass\n", encoding="utf-8"
        )
    (pytester.path / "tests" / "test_marked.py").write_text(
        "import pytest\n\n"
        "pytestmark = pytest.mark.both_databases\n\n"
        "def test_marked(database):\n    pass\n",
        encoding="utf-8",
    )
    result = pytester.runpytest_inprocess(*QUIET, "--collect-only", "-q", "tests")
    ids = {line.split("::")[-1] for line in result.outlines if "::" in line}
    both = {"store", "pipeline", "accounts", "scheduling", "web_admin", "marked"}
    assert ids == (
        {f"test_{name}[{backend}]" for name in both for backend in ("sqlite", "postgres")}
        | {"test_adapters[sqlite]", "test_web[sqlite]"}
    )
