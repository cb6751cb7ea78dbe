"""The admin in headless Chromium at 1400x1000 while PostgreSQL is stopped: a real web process on a
cluster of the test's own shows its outage page (HTML, 503) instead of raw JSON, and the page
comes back by itself once the database is up again.

Screenshots go under tests/browser's ARTEFACTS folder."""

import subprocess
from collections.abc import Iterator

import pytest
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

from tests.conftest import manage
from tests.support.cluster import Cluster, own_cluster
from tests.support.web import web_process

from .conftest import POLL_SECONDS, WAIT_SECONDS

pytestmark = [pytest.mark.browser, pytest.mark.process]

PASSWORD = "pw-outage-operator"  # a throwaway user of a throwaway cluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with own_cluster("pg-outage-page") as made:
        done = subprocess.run(
            manage("createsuperuser", "--no-input", "--username", "olga", "--email", "o@x.test"),
            env={**made.env, "DJANGO_SUPERUSER_PASSWORD": PASSWORD},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        yield made


def test_outage__the_admin_shows_its_outage_page_and_comes_back(
    browser, cluster, tmp_path, screenshots
):
    wait = WebDriverWait(
        browser, WAIT_SECONDS, POLL_SECONDS, ignored_exceptions=(WebDriverException,)
    )
    with web_process(cluster.env, tmp_path / "web.log") as base:
        queue = f"{base}/admin/reconciliation/reconciliationcase/"
        browser.get(f"{base}/admin/login/?next=/admin/reconciliation/reconciliationcase/")
        browser.find_element(By.ID, "id_username").send_keys("olga")
        browser.find_element(By.ID, "id_password").send_keys(PASSWORD)
        browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
        wait.until(ec.presence_of_element_located((By.ID, "changelist")))
        screenshots(browser, "before")

        cluster.stop()
        try:
            browser.get(queue)
            page = wait.until(ec.presence_of_element_located((By.ID, "plain-page")))
            screenshots(browser, "outage")
            assert page.get_attribute("data-status") == "503"
            text = page.text
            assert "The database cannot be reached" in text and "Nothing was changed" in text
            assert "DATABASE_UNAVAILABLE" not in browser.page_source  # no raw JSON
        finally:
            cluster.start()
        # The outage page reloads itself: the queue comes back without anyone clicking.
        wait.until(ec.presence_of_element_located((By.ID, "changelist")))
        assert browser.current_url == queue
        screenshots(browser, "back")
