"""The example pages on the official clients, in headless Chromium: examples/agui.html
(@ag-ui/client's HttpAgent) and examples/ai-sdk.html (the `ai` package's AbstractChat, useChat's
engine, over its DefaultChatTransport), loaded from examples/ on a loopback static server of their
own, talking to `orchestrator serve` on another origin (BATON_CORS_ORIGINS) on the offline model.
Each page answers a tool-heavy team turn (examples/team.yaml), round-trips an approval and a
rejection (examples/approvals.yaml) and shows a model's markup as text. The bundles come from `npm run build` in examples/protocol-pages
(scripts/test.sh runs it); a missing bundle fails these tests, and so does any error the client
throws (the pages show every error, which the tests read)."""

import shutil

import pytest
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

from harness import ORCH, ROOT, Serve, StaticSite

WAIT = 20  # seconds: every wait is bounded
EXAMPLES = ROOT / "examples"
BUNDLES = EXAMPLES / "protocol-pages" / "dist"
BUILD = "(cd examples/protocol-pages && npm ci && npm run build)"
TEAM_MESSAGE = "my points are missing and find me coffee deals"
ASK = "clip the coffee offer"


@pytest.fixture(scope="module")
def site():
    for bundle in ("agui.js", "ai-sdk.js"):
        assert (BUNDLES / bundle).is_file(), f"{BUNDLES / bundle} is missing: run {BUILD}"
    s = StaticSite(EXAMPLES)
    yield s
    s.close()


@pytest.fixture
def serve_for_pages(site, scripts, tmp_path, monkeypatch):
    """Starts `serve` allowing the pages' origin: on the offline model with an examples/ file, or
    over the scripted model without one."""
    monkeypatch.setenv("BATON_CORS_ORIGINS", site.origin)
    started = []

    def start(config=None):
        s = Serve(scripts, tmp_path / "store.redb", tmp_path / "serve.log",
                  config=EXAMPLES / config if config else None)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


def open_page(driver, origin, page, server):
    """Opens a page pointed at `server` and waits until its client module has loaded."""
    driver.get(f"{origin}/{page}?endpoint={server.url}")
    id_field = "thread" if page == "agui.html" else "chat"
    WebDriverWait(driver, WAIT).until(
        lambda d: d.find_element(By.ID, id_field).text or d.find_elements(By.CSS_SELECTOR, ".error"))
    assert_no_errors(driver)


def send(driver, message):
    box = driver.find_element(By.ID, "text")
    box.send_keys(message)
    box.send_keys(Keys.ENTER)


def assert_no_errors(driver):
    errors = [e.text for e in driver.find_elements(By.CSS_SELECTOR, ".error")]
    assert not errors, errors


def done_notes(driver):
    # Read in one script: the page re-renders its log while the turn streams, and an element
    # found by one command can be gone by the next (a stale element reference).
    return driver.execute_script(
        "return [...document.querySelectorAll('.note.done')].map((n) => n.innerText)")


def wait_done(driver, status):
    """Waits until the page's last `done (<status>)` note is this status (or it shows an error)."""
    try:
        WebDriverWait(driver, WAIT, ignored_exceptions=[StaleElementReferenceException]).until(
            lambda d: done_notes(d)[-1:] == [f"done ({status})"] or d.find_elements(By.CSS_SELECTOR, ".error"))
    except TimeoutException:
        raise AssertionError(f"no `done ({status})` in the page:\n{driver.find_element(By.ID, 'log').text}") from None
    assert_no_errors(driver)


def answers(driver):
    """(who, text) of every agent's bubble: the `who` label, then the text rendered as text."""
    out = []
    for bubble in driver.find_elements(By.CSS_SELECTOR, "#log .msg:not(.user):not(.approval)"):
        who = bubble.find_element(By.CSS_SELECTOR, ".who").text
        text = driver.execute_script(
            "return [...arguments[0].childNodes].slice(1).map((n) => n.textContent).join('')", bubble)
        out.append((who, text))
    return out


def notes(driver):
    return [n.text for n in driver.find_elements(By.CSS_SELECTOR, "#log .note")]


@pytest.mark.parametrize("page", ["agui.html", "ai-sdk.html"])
def test_a_page_answers_a_team_turn_with_the_official_client(driver, site, serve_for_pages, page, output_dir):
    open_page(driver, site.origin, page, serve_for_pages("team.yaml"))
    send(driver, TEAM_MESSAGE)
    wait_done(driver, "ok")
    assert done_notes(driver) == ["done (ok)"]
    said = answers(driver)
    assert said and all(text.strip() for _, text in said), said
    assert all(who and who != "assistant" for who, _ in said), f"each answer names its agent instance: {said}"
    assert any("🔧" in n for n in notes(driver)), f"the team's tool calls are shown: {notes(driver)}"
    # Nothing the model said became markup: the bubbles hold the who label and one text node.
    assert driver.execute_script(
        "return [...document.querySelectorAll('#log .msg')].every(b => b.children.length === 1)")
    assert driver.save_screenshot(str(output_dir / f"protocol-page-{page}.png"))


def decide_approval(driver, server, site, page, button):
    """Asks for the clip, waits for its approval card, clicks `button` and waits for the resumed
    turn to end `ok`; returns the notes the page showed."""
    open_page(driver, site.origin, page, server)
    send(driver, ASK)
    if page == "ai-sdk.html":
        wait_done(driver, "interrupted")  # the message's status, once the chat is ready again
    WebDriverWait(driver, WAIT).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, ".msg.approval") or d.find_elements(By.CSS_SELECTOR, ".error"))
    assert_no_errors(driver)
    [card] = driver.find_elements(By.CSS_SELECTOR, ".msg.approval")
    assert "clip_offer(" in card.text, card.text
    assert not ran(page, notes(driver)), "nothing ran before the decision"
    card.find_element(By.XPATH, f".//button[text()='{button}']").click()
    wait_done(driver, "ok")
    assert answers(driver), "the agent answered after the decision"
    return notes(driver)


def ran(page, shown):
    """Whether the page showed clip_offer's result: the clipped offer (AG-UI's TOOL_CALL_RESULT, a
    rejection is a result too), or the tool part's output (the AI SDK)."""
    if page == "agui.html":
        return any(n.startswith('↳ clip_offer: {"clipped"') for n in shown)
    return "🔧 clip_offer · output-available" in shown


@pytest.mark.parametrize("page", ["agui.html", "ai-sdk.html"])
def test_a_page_round_trips_an_approval(driver, site, serve_for_pages, page, output_dir):
    shown = decide_approval(driver, serve_for_pages("approvals.yaml"), site, page, "Approve")
    assert ran(page, shown), f"the approved call ran: {shown}"
    assert driver.save_screenshot(str(output_dir / f"protocol-page-approval-{page}.png"))


@pytest.mark.parametrize("page", ["agui.html", "ai-sdk.html"])
def test_a_page_rejects_a_call_which_then_never_runs(driver, site, serve_for_pages, page):
    shown = decide_approval(driver, serve_for_pages("approvals.yaml"), site, page, "Reject")
    assert not ran(page, shown), f"the rejected call did not run: {shown}"
    if page == "agui.html":
        refused = any(n.startswith('↳ clip_offer: {"error":{"code":"rejected_by_user"') for n in shown)
    else:
        refused = "🔧 clip_offer · output-error" in shown
    assert refused, f"the call's result is the rejection: {shown}"


@pytest.mark.parametrize("page", ["agui.html", "ai-sdk.html"])
def test_a_page_without_its_bundle_says_how_to_build_it(driver, serve_for_pages, page, tmp_path):
    server = serve_for_pages("team.yaml")
    (tmp_path / "bare").mkdir()
    shutil.copy(EXAMPLES / page, tmp_path / "bare" / page)
    bare = StaticSite(tmp_path / "bare")
    try:
        driver.get(f"{bare.origin}/{page}?endpoint={server.url}")
        error = WebDriverWait(driver, WAIT).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".error"))[0]
        assert "npm ci && npm run build" in error.text, error.text
        assert not driver.find_element(By.ID, "form").is_displayed()
    finally:
        bare.close()


@pytest.mark.parametrize("page", ["agui.html", "ai-sdk.html"])
def test_a_page_renders_model_text_as_text(driver, site, serve_for_pages, scripts, page):
    server = serve_for_pages()
    hostile = 'Look: <img src=x onerror="window.owned=1"><script>window.owned=2</script> **bold**'
    scripts.push(ORCH, text=hostile)
    open_page(driver, site.origin, page, server)
    send(driver, "hello")
    wait_done(driver, "ok")
    assert [text for _, text in answers(driver)] == [hostile]
    assert not driver.find_elements(By.CSS_SELECTOR, "#log img, #log script")
    assert driver.execute_script("return window.owned") is None
