"""The HTML brief in a real browser (issue 49): page 1's scorecard readable at 1400 px without scrolling
sideways, and a long appendix table (HTML-only, collapsed) sorting by a click on its column header, offline.
Debian's chromium + chromium-driver through Selenium, as tests/test_jupyterlab.py drives them."""
from __future__ import annotations

import shutil

import pytest

webdriver = pytest.importorskip("selenium.webdriver")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
pytestmark = [pytest.mark.slow, pytest.mark.e2e,
              pytest.mark.skipif(not (CHROMIUM and DRIVER), reason="needs Debian's chromium and chromium-driver")]


@pytest.fixture(scope="module")
def page(tiny_chain):
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    opts = Options()
    opts.binary_location, args = CHROMIUM, ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage"]
    [opts.add_argument(a) for a in args + ["--window-size=1400,1000"]]        # the width the issue reads page 1 at
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    driver.get((tiny_chain.work / "reports" / "brief.html").as_uri())
    yield driver
    driver.quit()


def test_page_one_reads_at_1400_px_without_scrolling_sideways(page):
    from selenium.webdriver.common.by import By
    assert page.execute_script("return window.innerWidth") <= 1400
    assert page.execute_script("return document.documentElement.scrollWidth") <= \
        page.execute_script("return window.innerWidth")
    card = page.find_element(By.CSS_SELECTOR, "table.scorecard")
    assert card.rect["x"] >= 0 and card.rect["x"] + card.rect["width"] <= 1400
    assert "Accelerators supported" in card.text


def test_a_long_appendix_table_sorts_by_a_click_on_its_header(page):
    from selenium.webdriver.common.by import By
    table = page.find_elements(By.CSS_SELECTOR, "details.raw table.sortable")[0]
    page.execute_script("arguments[0].closest('details').open = true", table)
    rows = lambda: [r.find_elements(By.TAG_NAME, "td")[0].text for r in table.find_elements(By.CSS_SELECTOR, "tbody tr")]
    first = table.find_elements(By.CSS_SELECTOR, "thead th")[0]
    first.click()
    up = [_key(t) for t in rows()]
    first.click()
    down = [_key(t) for t in rows()]
    assert len(up) > 8                                    # a table long enough to be HTML-only
    assert up == sorted(up) and down == sorted(up, reverse=True) and up != down or len(set(up)) == 1


def _key(text: str):
    """The page script's order: numbers ("1,234.5", "12 %") as numbers before text."""
    try:
        return (0, float(text.replace(",", "").replace("%", "").replace(" ", "").replace("\u2212", "-")), "")
    except ValueError:
        return (1, 0.0, text)


def test_the_printed_snapshot_sets_its_cards_three_to_a_row(page):
    """On an A4 page (182 mm between @page's margins: 688 CSS px) the snapshot's cards fill the width, three to a
    row (30 % + padding and border once made it two, leaving a third of page 2 empty)."""
    from selenium.webdriver.common.by import By
    size = page.get_window_size()
    page.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": "print"})
    page.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                         {"width": 688, "height": 1000, "deviceScaleFactor": 1, "mobile": False})
    try:
        tops = [round(c.rect["y"]) for c in page.find_elements(By.CSS_SELECTOR, ".cards .card")]
        assert len(tops) >= 3 and tops[0] == tops[1] == tops[2], tops
    finally:
        page.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
        page.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": ""})
        page.set_window_size(size["width"], size["height"])
