"""The web page in headless Chromium (selenium + the system chromium / chromedriver).

One flow over the sample corpus served by uvicorn on loopback, the agent on a scripted
OpenAI-compatible endpoint: search for a sample paper, filter by venue with a facet, open the
paper (sections, a table rendered as a table, a figure), ask a question about it and watch the
steps stream in, ask one the router answers with citations and click a citation to see the page
with the highlighted box, and run an example query in the SQL console. With ``NEUSYM_SCREENSHOT_DIR`` set, the screenshots are
also written there (that is how docs/screenshots/ was made).
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import httpx
import pytest

from neusym.interfaces.service import create_app
from neusym.store.db import connect_readonly
from neusym.store.versions import current_version

from .service_support import LiveServer, ScriptedAgentLLM
from .test_service import LONGEVAL, scripted_answer, table_rows

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
QUESTION = "How many tables are printed on page 3 of this paper?"
CITED_QUESTION = "How many tables are in this paper?"


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.skip("chromium / chromium-driver are not installed (make browsers installs them)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1280,900",
                 f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def site(corpus_settings):
    with ScriptedAgentLLM({}, delay_s=0.5) as llm:
        settings = corpus_settings.model_copy(update={"llm_base_url": llm.base_url, "llm_model": "scripted"})
        with LiveServer(create_app(settings)) as live:
            yield live, llm


def shoot(driver, tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.png"
    driver.save_screenshot(str(path))
    target = os.environ.get("NEUSYM_SCREENSHOT_DIR")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(target) / path.name)
    return path


def until(driver, condition, timeout: float = 30, what: str = "the page"):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.05).until(lambda d: condition(d), f"waiting for {what}")


def test_search_filter_open_ask_and_see_the_cited_page(browser, site, corpus_settings, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    live, llm = site
    d = browser
    css = lambda sel: d.find_elements(By.CSS_SELECTOR, sel)
    version = current_version(corpus_settings)
    con = connect_readonly(version.db_path)
    try:
        pid = con.execute("SELECT paper_id::VARCHAR FROM metadata WHERE title = ?", [LONGEVAL]).fetchone()[0]
        boxes = table_rows(con, pid, 3)
        n_tables = con.execute("SELECT count(*) FROM tables WHERE ref_paper_id = ?", [pid]).fetchone()[0]
    finally:
        con.close()

    # 1. search
    d.get(live.url + "/")
    until(d, lambda d: f"corpus v{version.number}" in d.find_element(By.ID, "corpus-status").text, what="the status")
    d.find_element(By.ID, "q").send_keys("human evaluation of summaries")
    d.find_element(By.ID, "search-button").click()
    until(d, lambda d: len(css("#results li.hit")) == 5, what="5 results")
    assert css("#results li.hit a.hit-title")[0].text == LONGEVAL
    assert all(s.text for s in css("#results .snippet"))
    venue_facets = {a.get_attribute("data-value"): a for a in css("#facet-venue a[data-facet=venue]")}
    assert set(venue_facets) == {"acl", "eacl", "naacl"}
    shoot(d, tmp_path, "1-search")

    # 2. filter by venue with the facet
    venue_facets["eacl"].click()
    until(d, lambda d: len(css("#results li.hit")) == 1, what="the venue filter")
    assert css("#results li.hit a.hit-title")[0].text == LONGEVAL
    assert "venue: eacl" in d.find_element(By.ID, "active-filters").text
    assert "venue=eacl" in d.current_url

    # 3. open the paper: sections, a table as a table, a figure
    css("#results li.hit a.hit-title")[0].click()
    until(d, lambda d: d.find_element(By.ID, "paper-title").text == LONGEVAL, what="the paper view")
    assert len(css("#pane-sections details.section")) >= 10
    d.find_element(By.CSS_SELECTOR, "#paper-tabs button[data-pane=tables]").click()
    table1 = css("#pane-tables figure.paper-table")[0]
    assert table1.find_element(By.TAG_NAME, "figcaption").text.startswith("Table 1:")
    cells = table1.find_elements(By.CSS_SELECTOR, ".table-html table td")
    assert len(cells) >= 30 and "PubMed (2018)" in [c.text for c in cells]
    shoot(d, tmp_path, "2-paper-tables")
    d.find_element(By.CSS_SELECTOR, "#paper-tabs button[data-pane=figures]").click()
    until(d, lambda d: d.execute_script(
        "const i = document.querySelector('#pane-figures img.figure-crop'); return i && i.naturalWidth > 100"),
        what="a figure image")

    # 4. ask about this paper; the steps stream in before the answer
    llm.replies[QUESTION] = scripted_answer(pid, boxes)
    d.find_element(By.ID, "ask-about-paper").click()
    until(d, lambda d: css("#ask-papers .chip") and css("#ask-papers .chip")[0].get_attribute("data-paper-id") == pid,
          what="the paper chip")
    until(d, lambda d: len(Select(d.find_element(By.ID, "ask-method")).options) > 2, what="the methods")
    Select(d.find_element(By.ID, "ask-method")).select_by_value("neusym")
    d.find_element(By.ID, "question").send_keys(QUESTION)
    d.find_element(By.ID, "ask-button").click()
    until(d, lambda d: len(css("#steps li.step")) >= 1, what="the first streamed step")
    assert not d.find_element(By.ID, "answer").is_displayed()  # streamed: a step is shown, the answer not yet
    until(d, lambda d: d.find_element(By.ID, "answer").is_displayed(), what="the answer")
    assert d.find_element(By.ID, "answer-text").text == "2"
    assert [s.get_attribute("data-action") for s in css("#steps li.step")] == [
        "RetrieveFromDatabase", "ViewImage", "GenerateAnswer"]
    assert "Table 2:" in d.execute_script("return document.querySelector('#steps pre.observation').textContent")
    view_image = css("#steps li.step[data-action=ViewImage] button.link")
    assert len(view_image) == 1

    # 5. the evidence of an answer: with the router (method auto, the agent's default once it exists)
    #    a counting question takes the symbolic path (no LLM) and cites the table captions with their
    #    boxes: click the first citation. Without it, the ViewImage step is the evidence to click.
    methods = httpx.get(live.url + "/ask/methods", timeout=30).json()
    if "auto" in [m["name"] for m in methods]:
        d.find_element(By.ID, "question").clear()
        d.find_element(By.ID, "question").send_keys(CITED_QUESTION)
        Select(d.find_element(By.ID, "ask-method")).select_by_value("auto")
        d.find_element(By.ID, "ask-button").click()
        until(d, lambda d: d.find_element(By.ID, "answer").is_displayed() and css("#citations a.citation-link"),
              what="an answer with citations")
        assert d.find_element(By.ID, "answer-text").text == str(n_tables)
        assert "route" in d.find_element(By.ID, "answer-meta").text
        verdict = d.find_element(By.CSS_SELECTOR, "#verification .verification")
        assert verdict.get_attribute("data-status") == "pass"
        # a count is the result of a query, and the page says so (not "read by the language model")
        assert verdict.get_attribute("data-basis") == "computed" and "computed by a query the system" in verdict.text
        link = css("#citations a.citation-link")[0]
        assert "Table 1:" in css("#citations li.citation")[0].text
        shoot(d, tmp_path, "3-ask")
    else:
        shoot(d, tmp_path, "3-ask")
        link = view_image[0]
    link.click()
    until(d, lambda d: d.find_element(By.ID, "page-dialog").get_attribute("open") is not None, what="the page dialog")
    until(d, lambda d: d.find_element(By.ID, "page-image").get_attribute("data-loaded") == "true", what="the page image")
    src = d.find_element(By.ID, "page-image").get_attribute("data-src")
    assert f"papers/{pid}/pages/3.png?bbox=" in src  # Table 1 (and the ViewImage box) are on page 3
    assert d.execute_script("return document.getElementById('page-image').naturalWidth") > 800
    time.sleep(0.3)
    shoot(d, tmp_path, "4-cited-page")
    d.find_element(By.ID, "page-close").click()

    # 6. the SQL console with an example query
    d.get(live.url + "/#/sql")
    until(d, lambda d: len(Select(d.find_element(By.ID, "sql-examples")).options) > 2, what="the examples")
    Select(d.find_element(By.ID, "sql-examples")).select_by_index(2)
    assert "paper_overview" in d.find_element(By.ID, "sql").get_attribute("value")
    d.find_element(By.ID, "sql-run").click()
    until(d, lambda d: len(css("#sql-result tbody tr")) == 5, what="the query result")
    headers = [th.text for th in css("#sql-result thead th")]
    assert headers == ["title", "table_count", "image_count", "equation_count"]
    assert "5 rows" in d.find_element(By.ID, "sql-status").text
    shoot(d, tmp_path, "5-sql")


def test_landing_page_and_the_citation_graph_on_the_paper_page(browser, site, corpus_settings, tmp_path):
    """``/`` shows the corpus (papers per venue and year, what the last refresh added) and the watch panel;
    a paper cited inside the corpus shows who cites it, with links both ways, and its similar papers."""
    from selenium.webdriver.common.by import By

    live, _ = site
    d = browser
    css = lambda sel: d.find_elements(By.CSS_SELECTOR, sel)
    con = connect_readonly(current_version(corpus_settings).db_path)
    try:
        ids = dict(con.execute("SELECT title, paper_id::VARCHAR FROM metadata").fetchall())
        venues = con.execute("SELECT count(DISTINCT (conference_abbreviation, pub_year)) FROM metadata").fetchone()[0]
        litgraph = ids["Construction of the Literature Graph in Semantic Scholar"]
        citing = {t for (t,) in con.execute(
            "SELECT DISTINCT m.title FROM reference r JOIN metadata m ON m.paper_id = r.ref_paper_id "
            "WHERE r.reference_content ILIKE '%construction of the literature graph in semantic scholar%'").fetchall()}
    finally:
        con.close()
    assert citing == {"SPECTER: Document-level Representation Learning using Citation-informed Transformers"}

    d.get(live.url + "/")
    until(d, lambda d: "5 papers" in d.find_element(By.ID, "overview-summary").text, what="the overview")
    assert len(css("#overview-venues tr")) == 1 + venues
    assert "5 papers" in d.find_element(By.ID, "overview-added-heading").text
    assert {a.text for a in css("#overview-added a")} == set(ids)
    assert "no saved searches yet" in d.find_element(By.ID, "watch-list").text
    shoot(d, tmp_path, "6-landing")

    d.get(live.url + f"/#/paper/{litgraph}")
    until(d, lambda d: "cited by 1 in this corpus" in d.find_element(By.ID, "paper-counts").text, what="the cited-by count")
    d.find_element(By.ID, "citedby-tab").click()
    links = css("#pane-citedby a")
    assert [a.text for a in links] == sorted(citing)
    links[0].click()
    until(d, lambda d: d.find_element(By.ID, "paper-title").text in citing, what="the citing paper")
    d.find_element(By.CSS_SELECTOR, "#paper-tabs button[data-pane=references]").click()
    back = [a for a in css("#pane-references a.in-corpus") if a.get_attribute("href").endswith(f"#/paper/{litgraph}")]
    assert len(back) == 1
    d.find_element(By.CSS_SELECTOR, "#paper-tabs button[data-pane=similar]").click()
    until(d, lambda d: len(css("#pane-similar li")) == 4, what="the similar papers")
    assert "similarity" in css("#pane-similar li")[0].text
    shoot(d, tmp_path, "7-cited-by")
