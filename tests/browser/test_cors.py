"""CORS in a real browser: the chat page (web/) served from one origin, `orchestrator serve` on
another with `BATON_CORS_ORIGINS`. The allowed origin chats and reads the episode header; a page
on any other origin is refused by the browser itself, before its POST leaves."""

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from harness import ORCH, ROOT, Serve, StaticSite
from test_chat import last_turn, send_by_keyboard, wait_footer

WAIT = 20  # seconds: every wait is bounded


@pytest.fixture
def sites():
    allowed, other = StaticSite(ROOT / "web"), StaticSite(ROOT / "web")
    yield allowed, other
    allowed.close()
    other.close()


@pytest.fixture
def cors_server(scripts, sites, tmp_path, monkeypatch):
    """`serve` allowing the first site's origin only."""
    monkeypatch.setenv("BATON_CORS_ORIGINS", sites[0].origin)
    s = Serve(scripts, tmp_path / "store.redb", tmp_path / "serve.log")
    yield s
    s.stop()


def open_page(driver, site, server):
    driver.get(f"{site.origin}/index.html?endpoint={server.url}/chat")
    WebDriverWait(driver, WAIT).until(lambda d: d.find_element(By.ID, "episode").text == "New conversation")
    assert driver.find_element(By.ID, "endpoint").get_attribute("value") == f"{server.url}/chat"


def test_a_page_on_an_allowed_origin_chats_with_the_endpoint_on_another(driver, sites, cors_server, scripts,
                                                                         output_dir):
    site = sites[0]
    assert site.origin != cors_server.url, "two origins"
    open_page(driver, site, cors_server)
    scripts.push(ORCH, text="Hello from across origins!")
    send_by_keyboard(driver, "hello")
    footer = wait_footer(driver)
    assert "Status: ok" in footer.text
    assert "Hello from across origins!" in last_turn(driver).text
    episode = driver.find_element(By.ID, "episode").text
    assert episode.startswith("Conversation "), episode
    # The page may read the response's episode header (exposed), not only the `completed` event.
    header = driver.execute_async_script(
        """
        const done = arguments[arguments.length - 1];
        fetch(arguments[0], {method: "POST", headers: {"content-type": "application/json"},
                             body: JSON.stringify({message: "again"})})
          .then(async (r) => { await r.text(); done(r.headers.get("x-baton-episode-id")); })
          .catch((e) => done("refused: " + e));
        """,
        f"{cors_server.url}/chat",
    )
    assert header and not header.startswith("refused"), header
    assert driver.save_screenshot(str(output_dir / "cors-allowed.png"))
    # A reload reads the conversation back across origins (a preflighted GET with the user header).
    driver.refresh()
    WebDriverWait(driver, WAIT).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, "#transcript footer.turn-footer.restored"))
    assert driver.find_element(By.ID, "episode").text == episode
    assert "Hello from across origins!" in driver.find_element(By.ID, "transcript").text


def test_a_page_on_another_origin_is_refused_by_the_browser(driver, sites, cors_server, scripts, output_dir):
    open_page(driver, sites[1], cors_server)
    asked = len(scripts.requests(ORCH))
    send_by_keyboard(driver, "hello")
    note = WebDriverWait(driver, WAIT).until(
        lambda d: last_turn(d).find_elements(By.CSS_SELECTOR, "p.interrupted")
    )[0]
    assert "could not reach" in note.text and "Failed to fetch" in note.text, note.text
    assert not last_turn(driver).find_elements(By.CSS_SELECTOR, "footer.turn-footer")
    assert len(scripts.requests(ORCH)) == asked, "the browser sent no POST: no model call was made"
    assert driver.save_screenshot(str(output_dir / "cors-refused.png"))


def test_across_origins_a_cut_turn_is_rejoined_and_stop_cancels(driver, sites, cors_server, scripts):
    """The rejoin (a GET with Last-Event-ID) and the stop (a POST without body) are preflighted
    requests of their own: both must pass CORS. The browser reaches `serve` through a proxy the test
    cuts."""
    from proxy import CuttingProxy
    from test_chat import SLOW_TEXT, block_text, queue_shopping_turn

    proxy = CuttingProxy(cors_server.url.removeprefix("http://"))
    try:
        driver.get(f"{sites[0].origin}/index.html?endpoint={proxy.url}/chat")
        driver.execute_script("sessionStorage.clear()")
        driver.refresh()
        WebDriverWait(driver, WAIT).until(lambda d: d.find_element(By.ID, "episode").text == "New conversation")

        def slow_turn():
            queue_shopping_turn(scripts, SLOW_TEXT, chunk_delay_ms=50)
            send_by_keyboard(driver, "find me coffee deals")
            WebDriverWait(driver, WAIT).until(
                lambda d: len(d.find_elements(By.CSS_SELECTOR, '#transcript > li.turn:last-child [data-agent="shopping[1]"] .text')) == 1
                and len(block_text(last_turn(d), "shopping[1]").split()) >= 5)

        slow_turn()
        proxy.cut()
        WebDriverWait(driver, WAIT).until(
            lambda d: last_turn(d).find_elements(By.CSS_SELECTOR, '.replaying[data-state="replaying"]'))
        footer = wait_footer(driver)
        assert footer.get_attribute("data-status") == "ok"
        assert block_text(last_turn(driver), "shopping[1]").strip() == SLOW_TEXT.strip()
        preflights = [t for m, t, _ in proxy.requests() if m == "OPTIONS"]
        assert any(t.endswith("/events") for t in preflights), preflights

        slow_turn()
        driver.find_element(By.ID, "stop").click()
        WebDriverWait(driver, WAIT).until(
            lambda d: len(d.find_elements(By.CSS_SELECTOR, "footer.turn-footer")) == 2)
        assert last_turn(driver).find_element(By.CSS_SELECTOR, "footer").get_attribute("data-status") == "cancelled"
        assert not last_turn(driver).find_elements(By.CSS_SELECTOR, ".error, .interrupted")
        assert any(m == "POST" and t.endswith("/cancel") for m, t, _ in proxy.requests())
    finally:
        proxy.close()
