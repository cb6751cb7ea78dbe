"""A real headless Chromium, driven through Debian's chromedriver; nothing is downloaded.

Browser tests skip (with the reason) only when Chromium is absent outside CI; in CI (CI=true)
its absence is a failure, since .ci/run installs it.
"""

import os
import shutil
from pathlib import Path

import pytest

# The operators of the reconciliation tests, as fixtures here too.
from tests.integration.reconciliation.conftest import make_user, operator  # noqa: F401

# Screenshots of the operator's walk, kept as CI artefacts (README, "Tests").
ARTEFACTS = Path(
    os.environ.get("BROWSER_ARTEFACTS_DIR")
    or Path(__file__).resolve().parents[2] / ".local" / "browser-artefacts"
)
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
WAIT_SECONDS = 30  # seconds, for any wait on the page
POLL_SECONDS = 0.05  # between two looks at the page while waiting (WebDriverWait says 0.5)

# pytest-django's live server listens here: loopback only.
os.environ.setdefault("DJANGO_LIVE_TEST_SERVER_ADDRESS", "127.0.0.1")


def _missing() -> list[str]:
    return [str(path) for path in (CHROMIUM, CHROMEDRIVER) if not os.access(path, os.X_OK)]


@pytest.fixture
def screenshots(request):
    """save(name): a PNG of the current page under ARTEFACTS/<test name>/, numbered in order."""
    folder = ARTEFACTS / request.node.name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    taken: list[Path] = []

    def save(driver, name: str) -> Path:
        path = folder / f"{len(taken) + 1:02d}-{name}.png"
        assert driver.save_screenshot(str(path)), f"no screenshot saved at {path}"
        taken.append(path)
        return path

    return save


def csp_violations(driver) -> list[str]:
    """The Content-Security-Policy violations Chromium's console reported since the last look."""
    return [
        entry["message"]
        for entry in driver.get_log("browser")
        if "Content Security Policy" in entry["message"]
    ]


@pytest.fixture
def browser(tmp_path):
    missing = _missing()
    if missing:
        message = (
            f"headless Chromium is not installed ({', '.join(missing)} missing); "
            "`apt-get install chromium chromium-driver` to run the browser tests"
        )
        if os.environ.get("CI") == "true":
            pytest.fail("CI must run the browser tests: " + message)
        pytest.skip(message)

    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
        "--window-size=1400,1000",
    ):
        options.add_argument(argument)
    # The console kept for `csp_violations`: Chromium reports each violation there.
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(executable_path=str(CHROMEDRIVER), log_output=str(tmp_path / "driver.log"))
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_page_load_timeout(WAIT_SECONDS)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(tmp_path / "chromium-profile", ignore_errors=True)
