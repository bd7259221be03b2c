"""The dashboard in a real browser (Debian's headless Chromium through Selenium
and chromedriver) against the real service after Slack messages were answered:
log in through the form, read the overview, change a budget and find it in the
audit log, open a run's trace, log out; a browser that never logged in sees
the login page and no data. A screenshot of each page goes to
$SWITCHBOARD_TEST_ARTIFACTS (default tests/artifacts/, ignored by git).

Skipped, saying why, when /usr/bin/chromium, chromedriver or selenium is
missing (`.ci/run` installs them when it can; `make test-browser` runs these)."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.paths import REPO_ROOT
from tests.web.admin.conftest import ADMIN_TOKEN
from tests.web.admin.live import MESSAGES, figure, live_service

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"

try:
    from selenium import webdriver
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.chrome.service import Service as DriverService
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    SELENIUM = True
except ImportError:  # pragma: no cover - the dev extra has it
    SELENIUM = False


def _missing() -> str | None:
    if not SELENIUM:
        return "selenium is not installed (pip install -e '.[dev]')"
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is missing (apt-get install -y chromium chromium-driver)"
    if not Path(CHROMEDRIVER).exists():
        return "chromedriver is missing (apt-get install -y chromium-driver)"
    return None


pytestmark = [
    pytest.mark.e2e,
    pytest.mark.browser,
    pytest.mark.timeout(240),
    pytest.mark.skipif(_missing() is not None, reason=f"no browser: {_missing()}"),
]

SECRET_WORDS = ("UALICE0001", "UBOB000002")
"""Data only a logged-in admin may see."""


def artifacts() -> Path:
    where = os.environ.get("SWITCHBOARD_TEST_ARTIFACTS")
    path = Path(where) if where else REPO_ROOT / "tests" / "artifacts"
    path = path / "admin"
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextmanager
def chromium() -> Iterator[Any]:
    os.environ.setdefault("SE_OFFLINE", "true")  # never let Selenium Manager download
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,900",
        "--no-first-run",
        "--disable-extensions",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=DriverService(CHROMEDRIVER))
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def _wait_for(driver: Any, css: str) -> Any:
    return WebDriverWait(driver, 30).until(ec.presence_of_element_located((By.CSS_SELECTOR, css)))


def _click(driver: Any, element: Any) -> None:
    """Click something that loads a new page, and wait until the old one is gone
    (so no later lookup finds an element of the page being left)."""
    driver.execute_script("window.__leaving = true")  # gone once the next page loads
    element.click()
    # Mid-navigation a script can fail ("no execution context", a node of the
    # page being left): keep asking.
    WebDriverWait(driver, 30, ignored_exceptions=(WebDriverException,)).until(
        lambda d: d.execute_script(
            "return window.__leaving === undefined && document.readyState === 'complete'"
        )
    )


def _shot(driver: Any, name: str) -> Path:
    path = artifacts() / f"{name}.png"
    driver.save_screenshot(str(path))
    return path


def _admin_session(base: str, overview_tokens: str) -> dict[str, Any]:
    """Everything the logged-in browser does; what it saw, for the asserts."""
    seen: dict[str, Any] = {}
    with chromium() as driver:
        driver.get(base + "/admin")
        _wait_for(driver, "#token")
        seen["login_url"] = driver.current_url
        seen["login_has_data"] = any(w in driver.page_source for w in SECRET_WORDS)
        _shot(driver, "login")

        driver.find_element(By.ID, "token").send_keys(ADMIN_TOKEN)
        _click(driver, driver.find_element(By.CSS_SELECTOR, "form.login button"))
        _wait_for(driver, "#messages-total")
        seen["overview_url"] = driver.current_url
        seen["messages"] = driver.find_element(By.ID, "messages-total").text
        seen["tokens"] = driver.find_element(By.ID, "tokens-total").text
        seen["charts"] = len(driver.find_elements(By.CSS_SELECTOR, "svg.bars rect.bar"))
        seen["cookie"] = next(
            (c for c in driver.get_cookies() if c["name"] == "switchboard_admin"), None
        )
        _shot(driver, "overview")

        _click(driver, driver.find_element(By.LINK_TEXT, "Users"))
        _wait_for(driver, "#users")
        _shot(driver, "users")
        row = driver.find_element(By.XPATH, "//tr[td[contains(., 'slack:UALICE0001')]]")
        row.find_element(By.CSS_SELECTOR, "input[name=budget]").send_keys("75k")
        _click(driver, row.find_element(By.XPATH, ".//button[. = 'Set budget']"))
        _wait_for(driver, ".notice")
        seen["notice"] = driver.find_element(By.CSS_SELECTOR, ".notice").text
        row = driver.find_element(By.XPATH, "//tr[td[contains(., 'slack:UALICE0001')]]")
        seen["alice_limit"] = row.find_element(By.CSS_SELECTOR, ".limit").text
        _shot(driver, "users-after-budget")

        _click(driver, driver.find_element(By.LINK_TEXT, "Audit log"))
        _wait_for(driver, "#f-action").send_keys("setbudget")
        _click(driver, driver.find_element(By.CSS_SELECTOR, "form.filters button"))
        _wait_for(driver, "#audit tbody tr")
        seen["audit_rows"] = [
            [td.text for td in tr.find_elements(By.TAG_NAME, "td")]
            for tr in driver.find_elements(By.CSS_SELECTOR, "#audit tbody tr")
        ]
        _shot(driver, "audit")

        _click(driver, driver.find_element(By.LINK_TEXT, "Runs"))
        _wait_for(driver, "#runs")
        _shot(driver, "runs")
        _click(driver, driver.find_element(By.CSS_SELECTOR, "#runs tbody a"))
        _wait_for(driver, "#run-facts")
        seen["trace_kinds"] = [
            tr.find_elements(By.TAG_NAME, "td")[1].text
            for tr in driver.find_elements(By.CSS_SELECTOR, "#spans tbody tr")
        ]
        _shot(driver, "trace")

        _click(driver, driver.find_element(By.LINK_TEXT, "Jobs"))
        _wait_for(driver, "#jobs")
        _shot(driver, "jobs")

        _click(driver, driver.find_element(By.CSS_SELECTOR, "form.logout button"))
        _wait_for(driver, "#token")
        driver.get(base + "/admin/users")
        _wait_for(driver, "#token")
        seen["after_logout_url"] = driver.current_url
        seen["after_logout_has_data"] = any(w in driver.page_source for w in SECRET_WORDS)
    seen["overview_tokens_http"] = overview_tokens
    return seen


def _anonymous(base: str) -> list[tuple[str, str, bool]]:
    """(page asked for, where the browser ended, whether it showed any data)."""
    out = []
    with chromium() as driver:
        for path in ("/admin", "/admin/users", "/admin/runs", "/admin/jobs", "/admin/audit"):
            driver.get(base + path)
            _wait_for(driver, "body")
            shown = any(w in driver.page_source for w in SECRET_WORDS)
            out.append((path, driver.current_url, shown))
        _shot(driver, "logged-out")
    return out


async def test_admin_in_a_browser(tmp_path: Path) -> None:
    async with live_service(tmp_path) as live:
        tokens = figure(await live.overview(), "tokens-total") or "?"
        seen = await asyncio.to_thread(_admin_session, live.url, tokens)

    assert seen["login_url"] == live.url + "/admin/login"
    assert not seen["login_has_data"]
    assert seen["overview_url"] == live.url + "/admin"
    assert seen["messages"] == str(len(MESSAGES))
    assert seen["tokens"] == seen["overview_tokens_http"] != "0"
    assert seen["charts"] == 28
    cookie = seen["cookie"]
    assert cookie is not None and cookie["httpOnly"] is True
    assert cookie["sameSite"] == "Strict" and cookie["path"] == "/admin"
    assert seen["notice"] == "Budget saved."
    assert seen["alice_limit"] == "75,000"
    budget_rows = [row for row in seen["audit_rows"] if "/setbudget" in row]
    assert len(budget_rows) == 1
    assert budget_rows[0][1] == "admin-web" and budget_rows[0][4] == "slack:UALICE0001"
    assert "75000" in budget_rows[0][6]
    assert "llm" in seen["trace_kinds"]
    assert seen["after_logout_url"] == live.url + "/admin/login"
    assert not seen["after_logout_has_data"]
    for name in ("login", "overview", "users", "audit", "runs", "trace", "jobs"):
        assert (artifacts() / f"{name}.png").stat().st_size > 1000


async def test_a_browser_that_never_logged_in_sees_no_data(tmp_path: Path) -> None:
    async with live_service(tmp_path) as live:
        visits = await asyncio.to_thread(_anonymous, live.url)
    for path, landed, shown in visits:
        assert landed == live.url + "/admin/login", path
        assert not shown, path
