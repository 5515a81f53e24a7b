"""Durable turns in the chat page (headless Chromium): a connection cut mid-turn is rejoined with
Last-Event-ID and says it is replaying, Stop cancels the turn on the server, a reload mid-turn
rejoins the running turn. The browser talks to `orchestrator serve` through a proxy the test cuts
(tests/browser/proxy.py)."""

import time

from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from harness import stored
from test_chat import SLOW_TEXT, WAIT, block_text, last_turn, start_slow_shopping_turn

SLOW = SLOW_TEXT.strip()


def episode_of(driver):
    return driver.find_element(By.ID, "episode").text.removeprefix("Conversation ")


def wait_live_footer(driver):
    """The footer of a turn that streamed (not one restored from the conversation's history)."""
    return WebDriverWait(driver, WAIT).until(
        lambda d: last_turn(d).find_elements(By.CSS_SELECTOR, "footer.turn-footer:not(.restored)")
    )[0]


def resumes(proxy):
    """The resume requests the browser sent: (path, Last-Event-ID or None)."""
    return [(target, headers.get("last-event-id")) for method, target, headers in proxy.requests()
            if method == "GET" and "/turns/" in target and target.endswith("/events")]


def shopping_reply(server, episode):
    server.stop()
    messages = stored(server.store_path, "local", episode)
    replies = [m for m in messages if m["agent"] == "shopping[1]"]
    assert len(replies) == 1, messages
    return replies[0]


def test_a_cut_connection_is_replayed_and_the_answer_appears_once(driver, own_server, proxy, scripts, output_dir):
    start_slow_shopping_turn(driver, proxy, scripts)
    episode = episode_of(driver)
    shown_before = len(block_text(last_turn(driver), "shopping[1]").split())
    cut = time.monotonic()
    proxy.cut()

    note = WebDriverWait(driver, WAIT, poll_frequency=0.02).until(
        lambda d: last_turn(d).find_elements(By.CSS_SELECTOR, '.replaying[data-state="replaying"]'))[0]
    replaying_after = time.monotonic() - cut
    print(f"replaying shown {replaying_after * 1000:.0f} ms after the cut")
    # The first reconnect waits at most 250 ms: a rejoin is quick, not a timeout.
    assert replaying_after < 2, replaying_after
    assert note.text == "Replaying: rejoined the turn where it stopped…"
    assert driver.save_screenshot(str(output_dir / "chat-replaying.png"))
    footer = wait_live_footer(driver)
    assert footer.get_attribute("data-status") == "ok"
    turns = driver.find_elements(By.CSS_SELECTOR, "#transcript > li.turn")
    assert len(turns) == 1
    assert block_text(turns[0], "orchestrator") == "Looking."
    assert block_text(turns[0], "shopping[1]").strip() == SLOW, "the whole answer, nothing twice"
    assert not turns[0].find_elements(By.CSS_SELECTOR, ".interrupted")
    replayed = turns[0].find_element(By.CSS_SELECTOR, ".replaying")
    assert replayed.get_attribute("data-state") == "replayed"
    assert replayed.text == "↻ Rejoined after a lost connection; nothing was shown twice."

    # The rejoin asked for the events after the last one shown, of this turn, through the proxy.
    (path, last_id), *more = resumes(proxy)
    assert not more, resumes(proxy)
    turn_id = path.split("/turns/")[1].removesuffix("/events")
    assert path == f"/chat/{episode}/turns/{turn_id}/events"
    assert last_id.startswith(f"{turn_id}:") and int(last_id.rsplit(":", 1)[1]) > shown_before, last_id

    reply = shopping_reply(own_server, episode)
    assert reply["status"] == "ok" and reply["content"].strip() == SLOW, "the turn ran on without the client"


def test_stop_cancels_the_turn_on_the_server_and_shows_cancelled(driver, own_server, proxy, scripts, output_dir):
    start_slow_shopping_turn(driver, proxy, scripts)
    episode = episode_of(driver)
    driver.find_element(By.ID, "stop").click()

    footer = wait_live_footer(driver)
    assert footer.get_attribute("data-status") == "cancelled"
    assert footer.find_element(By.CSS_SELECTOR, ".summary").text.startswith("Status: cancelled · ")
    shown = block_text(last_turn(driver), "shopping[1]")
    time.sleep(0.3)
    assert block_text(last_turn(driver), "shopping[1]") == shown, "nothing arrives after completed"
    assert 5 <= len(shown.split()) < len(SLOW.split())
    assert not last_turn(driver).find_elements(By.CSS_SELECTOR, ".interrupted")
    assert driver.find_element(By.ID, "send").is_enabled() and not driver.find_element(By.ID, "stop").is_enabled()
    assert driver.save_screenshot(str(output_dir / "chat-stopped.png"))

    cancels = [(m, t) for m, t, _ in proxy.requests() if t.endswith("/cancel")]
    assert len(cancels) == 1 and cancels[0][0] == "POST" and cancels[0][1].startswith(f"/chat/{episode}/turns/")
    assert resumes(proxy) == [], "the stream was read to its end: a stop is not a disconnect"
    reply = shopping_reply(own_server, episode)
    assert reply["status"] == "cancelled", reply
    assert reply["content"].strip() == shown.strip(), "the server kept what was shown"


def test_a_reload_mid_turn_rejoins_the_running_turn_and_shows_the_answer_once(driver, own_server, proxy, scripts):
    start_slow_shopping_turn(driver, proxy, scripts)
    episode = episode_of(driver)
    driver.refresh()

    note = WebDriverWait(driver, WAIT).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, '#transcript .replaying[data-state="replaying"]'))[0]
    assert note.text == "Replaying the running turn from its start…"
    assert episode_of(driver) == episode
    footer = wait_live_footer(driver)
    assert footer.get_attribute("data-status") == "ok"
    turns = driver.find_elements(By.CSS_SELECTOR, "#transcript > li.turn")
    assert len(turns) == 1, "the running turn is shown once"
    assert turns[0].find_element(By.CSS_SELECTOR, ".msg.user .text").text == "find me coffee deals"
    assert block_text(turns[0], "orchestrator") == "Looking."
    assert block_text(turns[0], "shopping[1]").strip() == SLOW, "the whole answer, nothing twice"
    assert turns[0].find_element(By.CSS_SELECTOR, ".replaying").text == \
        "↻ Rejoined the running turn; shown from its first event."
    [(path, last_id)] = resumes(proxy)
    assert path.startswith(f"/chat/{episode}/turns/") and last_id is None, "rejoined from the start"

    reply = shopping_reply(own_server, episode)
    assert reply["status"] == "ok" and reply["content"].strip() == SLOW
