"""The chat page (web/) in headless Chromium against a real `orchestrator serve` over the scripted
model and Forethought servers."""

import signal

from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

from harness import MIXED_MESSAGE, ORCH, SHOP, SHOP_TEXT, SUPPORT_TEXT, Serve, stored

WAIT = 20  # seconds: every wait is bounded


def open_page(driver, server):
    """Opens the page on a new conversation: the tab's kept episode (a reload restores it) is
    forgotten first, since one browser serves every test."""
    driver.get(server.url + "/")
    driver.execute_script("sessionStorage.clear()")
    driver.get(server.url + "/")
    WebDriverWait(driver, WAIT).until(lambda d: d.execute_script("return document.readyState") == "complete")
    # The module script has run once the episode label is set by it.
    WebDriverWait(driver, WAIT).until(lambda d: d.find_element(By.ID, "episode").text == "New conversation")


def send_by_keyboard(driver, message):
    box = driver.find_element(By.ID, "message")
    box.send_keys(message)
    box.send_keys(Keys.ENTER)


def last_turn(driver):
    return driver.find_elements(By.CSS_SELECTOR, "#transcript > li.turn")[-1]


def wait_footer(driver):
    return WebDriverWait(driver, WAIT).until(
        lambda d: last_turn(d).find_elements(By.CSS_SELECTOR, "footer.turn-footer")
    )[0]


def block_text(turn, agent):
    blocks = turn.find_elements(By.CSS_SELECTOR, f'section.agent[data-agent="{agent}"]')
    assert len(blocks) == 1, f"one block for {agent}, got {len(blocks)}"
    return blocks[0].find_element(By.CSS_SELECTOR, ".text").get_attribute("textContent")


SLOW_TEXT = "word " * 200


def queue_shopping_turn(scripts, text, chunk_delay_ms=0):
    scripts.push(ORCH, text="Looking.", tool_calls=[
        {"name": "ask_shopping", "arguments": {"query": "find me coffee deals", "intent_count": 1}}])
    scripts.push(SHOP, text=text, chunk_delay_ms=chunk_delay_ms)


def start_slow_shopping_turn(driver, server, scripts):
    """Opens the page and sends a turn whose shopping answer streams slowly; returns once five
    words of it are shown."""
    open_page(driver, server)
    queue_shopping_turn(scripts, SLOW_TEXT, chunk_delay_ms=50)
    send_by_keyboard(driver, "find me coffee deals")
    WebDriverWait(driver, WAIT).until(
        lambda d: len(d.find_elements(By.CSS_SELECTOR, '[data-agent="shopping[1]"] .text')) == 1
        and len(block_text(last_turn(d), "shopping[1]").split()) >= 5
    )


def test_a_mixed_turn_renders_preamble_both_answers_progress_and_footer(driver, server, scripts, output_dir):
    open_page(driver, server)
    # Keyboard only: Tab to the skip link, Enter moves focus to the message box, Enter sends.
    driver.find_element(By.TAG_NAME, "body").send_keys(Keys.TAB)
    driver.switch_to.active_element.send_keys(Keys.ENTER)
    assert driver.switch_to.active_element.get_attribute("id") == "message"
    # Count updates of the shopping block to see the text arrive in pieces, not at the end.
    driver.execute_script("""
        window.shoppingUpdates = 0;
        new MutationObserver((records) => {
          for (const r of records) if (r.target.closest?.('[data-agent="shopping[1]"] .text')) window.shoppingUpdates++;
        }).observe(document.getElementById('transcript'), {subtree: true, childList: true, characterData: true});
    """)
    scripts.mixed_turn(chunk_delay_ms=30, shop_delay_ms=300)
    driver.switch_to.active_element.send_keys(MIXED_MESSAGE + Keys.ENTER)

    footer = wait_footer(driver)
    turn = last_turn(driver)
    assert turn.find_element(By.CSS_SELECTOR, ".msg.user .text").text == MIXED_MESSAGE
    assert block_text(turn, "orchestrator") == "Let me check both."
    assert block_text(turn, "support[1]") == SUPPORT_TEXT
    assert block_text(turn, "shopping[1]") == SHOP_TEXT
    order = [s.get_attribute("data-agent") for s in turn.find_elements(By.CSS_SELECTOR, "section.agent")]
    assert order == ["orchestrator", "support[1]", "shopping[1]"], "blocks in speaking order"
    assert driver.execute_script("return window.shoppingUpdates") > 5, "shopping streamed in pieces"

    progress = [li.get_attribute("textContent") for li in turn.find_elements(By.CSS_SELECTOR, ".activity-list li")]
    assert any(p.startswith("▶ Support started: “my receipt didn't scan”") for p in progress), progress
    assert any(p.startswith("▶ Shopping started: “find me coffee deals”") for p in progress), progress
    assert any(p.startswith("✓ Support finished (ok) in ") for p in progress), progress
    assert any(p.startswith("✓ Shopping finished (ok) in ") and p.endswith("105 tokens") for p in progress), progress

    assert footer.get_attribute("data-status") == "ok"
    summary = footer.find_element(By.CSS_SELECTOR, ".summary").text
    assert summary.startswith("Status: ok · ") and summary.endswith(" · 255 tokens"), summary
    per_agent = footer.find_element(By.CSS_SELECTOR, ".per-agent").text
    assert per_agent == "Orchestrator 120 in / 30 out; Shopping 80 in / 25 out"
    assert driver.find_element(By.ID, "announcer").get_attribute("textContent") == "Reply complete."
    assert driver.find_element(By.ID, "episode").text.startswith("Conversation ")
    assert driver.find_element(By.ID, "send").is_enabled() and not driver.find_element(By.ID, "stop").is_enabled()
    assert driver.save_screenshot(str(output_dir / "chat-mixed-turn.png"))


def test_an_in_band_error_renders_as_an_error(driver, server, scripts, output_dir):
    open_page(driver, server)
    scripts.push(ORCH, status=500, message="scripted outage")
    send_by_keyboard(driver, "find me coffee deals")
    footer = wait_footer(driver)
    error = last_turn(driver).find_element(By.CSS_SELECTOR, ".errors .error")
    assert error.get_attribute("role") == "alert"
    assert error.text.startswith("⚠ Error (model_server_error, Orchestrator): ")
    # Baton's own message, never the vendor's body (which the server keeps out of client events).
    assert "the model server failed (HTTP 500)" in error.text and error.text.endswith("You can try again.")
    assert "scripted outage" not in error.text
    assert footer.get_attribute("data-status") == "error"
    assert footer.find_element(By.CSS_SELECTOR, ".summary").text.startswith("Status: error · ")
    assert driver.save_screenshot(str(output_dir / "chat-error.png"))


def test_a_second_message_continues_the_episode(driver, server, scripts):
    open_page(driver, server)
    scripts.push(ORCH, text="Hello! How can I help?")
    send_by_keyboard(driver, "hello")
    wait_footer(driver)
    episode = driver.find_element(By.ID, "episode").text
    assert episode.startswith("Conversation ")
    scripts.push(ORCH, text="You are welcome.")
    send_by_keyboard(driver, "thanks")
    WebDriverWait(driver, WAIT).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "footer.turn-footer")) == 2)
    assert driver.find_element(By.ID, "episode").text == episode
    assert block_text(last_turn(driver), "orchestrator") == "You are welcome."
    # The second model call saw the first turn: the server continued the same episode.
    said = [m.get("content") for m in scripts.requests(ORCH)[-1]["messages"]]
    assert "hello" in said and "Hello! How can I help?" in said and said[-1] == "thanks", said


def test_a_lost_connection_says_so_and_a_retry_shows_the_answer_once(driver, own_server, scripts, tmp_path):
    start_slow_shopping_turn(driver, own_server, scripts)
    addr = own_server.url.removeprefix("http://")
    own_server.stop(signal.SIGKILL)  # the network goes away mid-stream
    note = WebDriverWait(driver, WAIT).until(
        lambda d: last_turn(d).find_elements(By.CSS_SELECTOR, ".interrupted")
    )[0]
    assert note.text.startswith("⚠ Connection lost: ")
    # The server is gone, not just the connection: the page tried to rejoin, a bounded number of times.
    assert note.text.endswith("(4 reconnects failed). Try again"), note.text
    assert not last_turn(driver).find_elements(By.CSS_SELECTOR, ".replaying"), "no replay state left"
    retry = note.find_element(By.CSS_SELECTOR, "button.retry")

    back = Serve(scripts, own_server.store_path, tmp_path / "serve-again.log", addr=addr)
    try:
        queue_shopping_turn(scripts, SHOP_TEXT)
        retry.send_keys(Keys.ENTER)  # keyboard again
        wait_footer(driver)
        turns = driver.find_elements(By.CSS_SELECTOR, "#transcript > li.turn")
        assert len(turns) == 1, "the retry re-renders the same turn"
        assert block_text(turns[0], "orchestrator") == "Looking."
        assert block_text(turns[0], "shopping[1]") == SHOP_TEXT, "nothing shown twice"
        assert not turns[0].find_elements(By.CSS_SELECTOR, ".interrupted")
    finally:
        back.stop()


def test_a_reload_restores_the_conversation_and_the_next_message_continues_it(driver, own_server, scripts):
    open_page(driver, own_server)
    queue_shopping_turn(scripts, "Three coffee deals.")
    send_by_keyboard(driver, "find me coffee deals")
    wait_footer(driver)
    episode = driver.find_element(By.ID, "episode").text
    assert episode.startswith("Conversation "), episode

    driver.refresh()
    WebDriverWait(driver, WAIT).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, "#transcript footer.turn-footer.restored"))
    assert driver.find_element(By.ID, "episode").text == episode, "the same conversation"
    turns = driver.find_elements(By.CSS_SELECTOR, "#transcript > li.turn")
    assert len(turns) == 1, "the turn is shown once"
    assert turns[0].find_element(By.CSS_SELECTOR, ".msg.user .text").text == "find me coffee deals"
    assert block_text(turns[0], "orchestrator") == "Looking."
    assert block_text(turns[0], "shopping[1]") == "Three coffee deals."
    assert turns[0].find_element(By.CSS_SELECTOR, "footer").get_attribute("data-status") == "ok"
    assert driver.find_element(By.ID, "earlier").is_displayed() is False, "no older page"

    queue_shopping_turn(scripts, "Two tea deals.")
    send_by_keyboard(driver, "and tea?")
    WebDriverWait(driver, WAIT).until(
        lambda d: len(d.find_elements(By.CSS_SELECTOR, "#transcript > li.turn")) == 2
        and last_turn(d).find_elements(By.CSS_SELECTOR, "footer.turn-footer:not(.restored)"))
    assert block_text(last_turn(driver), "shopping[1]") == "Two tea deals."
    assert driver.find_element(By.ID, "episode").text == episode, "the next message continued it"
    # The second turn was told the first: it is one conversation on the server too.
    episode_id = episode.removeprefix("Conversation ")
    driver.refresh()
    WebDriverWait(driver, WAIT).until(
        lambda d: len(d.find_elements(By.CSS_SELECTOR, "#transcript footer.turn-footer.restored")) == 2)
    own_server.stop()
    said = [m["content"] for m in stored(own_server.store_path, "local", episode_id)]
    assert said == ["find me coffee deals", "Looking.", "Three coffee deals.",
                    "and tea?", "Looking.", "Two tea deals."], said


def test_a_kept_episode_the_server_does_not_know_starts_a_new_conversation(driver, own_server):
    open_page(driver, own_server)
    driver.execute_script("sessionStorage.setItem('baton.episode:chat:local', 'ep-from-elsewhere')")
    driver.refresh()
    WebDriverWait(driver, WAIT).until(lambda d: d.find_element(By.ID, "episode").text == "New conversation")
    assert driver.find_elements(By.CSS_SELECTOR, "#transcript > li.turn") == []
    assert driver.execute_script("return sessionStorage.getItem('baton.episode:chat:local')") is None


def test_earlier_messages_load_on_demand_and_a_turn_split_between_pages_is_shown_once(driver, own_server,
                                                                                     scripts):
    open_page(driver, own_server)
    queue_shopping_turn(scripts, "answer 1")
    send_by_keyboard(driver, "question 1")
    wait_footer(driver)
    episode_id = driver.find_element(By.ID, "episode").text.removeprefix("Conversation ")
    # 17 more turns in the same episode, straight to the endpoint: 54 messages, more than a page (50).
    for i in range(2, 19):
        queue_shopping_turn(scripts, f"answer {i}")
    sent = driver.execute_async_script(
        """
        const [episode, done] = [arguments[0], arguments[arguments.length - 1]];
        (async () => {
          for (let i = 2; i <= 18; i++) {
            const r = await fetch("chat", {method: "POST", headers: {"content-type": "application/json"},
              body: JSON.stringify({message: `question ${i}`, episode_id: episode})});
            await r.text();
          }
          done("ok");
        })().catch((e) => done(String(e)));
        """,
        episode_id,
    )
    assert sent == "ok", sent

    driver.refresh()
    WebDriverWait(driver, WAIT).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, "#transcript footer.turn-footer.restored"))
    turns = driver.find_elements(By.CSS_SELECTOR, "#transcript > li.turn")
    # The newest 50 messages: turns 3 to 18 whole, and turn 2's two replies without its question.
    assert len(turns) == 17, len(turns)
    assert turns[0].find_element(By.CSS_SELECTOR, ".msg.user .text").text == "…"
    assert block_text(turns[0], "shopping[1]") == "answer 2"
    assert block_text(turns[-1], "shopping[1]") == "answer 18"
    earlier = driver.find_element(By.ID, "earlier")
    assert earlier.is_displayed()

    earlier.click()
    WebDriverWait(driver, WAIT).until(
        lambda d: len(d.find_elements(By.CSS_SELECTOR, "#transcript > li.turn")) == 18)
    WebDriverWait(driver, WAIT).until(lambda d: not d.find_element(By.ID, "earlier").is_displayed())
    turns = driver.find_elements(By.CSS_SELECTOR, "#transcript > li.turn")
    said = [t.find_element(By.CSS_SELECTOR, ".msg.user .text").text for t in turns]
    assert said == [f"question {i}" for i in range(1, 19)], said
    answers = [block_text(t, "shopping[1]") for t in turns]
    assert answers == [f"answer {i}" for i in range(1, 19)], "each answer once, in order"
