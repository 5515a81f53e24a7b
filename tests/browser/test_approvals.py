"""Approvals in the chat page (headless Chromium, real `orchestrator serve` with
examples/approvals.yaml on the offline model): "clip the coffee offer" makes card_keeper (called
by the concierge) call clip_offer, which needs a person's approval. The page shows the call as a
card; Approve or Reject resumes the turn; a reload while it waits shows the card again."""

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from harness import ROOT, Serve, stored
from test_chat import WAIT, last_turn, open_page, send_by_keyboard, wait_footer

ASK = "clip the coffee offer"
KEEPER = "card_keeper[1]"


@pytest.fixture
def approvals_server(scripts, tmp_path):
    s = Serve(scripts, tmp_path / "store.redb", tmp_path / "serve.log", config=ROOT / "examples" / "approvals.yaml")
    yield s
    s.stop()


def turns(driver):
    return driver.find_elements(By.CSS_SELECTOR, "#transcript > li.turn")


def wait_turns(driver, n):
    WebDriverWait(driver, WAIT).until(lambda d: len(turns(d)) == n)


def pending_card(driver):
    """Asks for the clip and returns its card once the turn has ended `interrupted`."""
    send_by_keyboard(driver, ASK)
    footer = wait_footer(driver)
    assert footer.get_attribute("data-status") == "interrupted"
    assert footer.find_element(By.CSS_SELECTOR, ".summary").text.startswith("Status: interrupted · ")
    cards = last_turn(driver).find_elements(By.CSS_SELECTOR, ".approvals section.approval")
    assert len(cards) == 1
    return cards[0]


def resumed_turn(driver, said, n=2):
    """The turn a card's decision started (the n-th), once it completed `ok`, showing `said` as the
    person's words."""
    wait_turns(driver, n)
    assert wait_footer(driver).get_attribute("data-status") == "ok"
    turn = last_turn(driver)
    assert turn.find_element(By.CSS_SELECTOR, ".msg.user .text").text == said
    return turn


def activity(turn):
    return [li.get_attribute("textContent") for li in turn.find_elements(By.CSS_SELECTOR, ".activity-list li")]


def answer_text(turn, agent):
    return turn.find_element(By.CSS_SELECTOR, f'section.agent[data-agent="{agent}"] .text').get_attribute("textContent")


def test_a_call_waiting_for_approval_shows_a_card_and_approve_resumes_it(driver, approvals_server, output_dir):
    open_page(driver, approvals_server)
    card = pending_card(driver)
    assert card.get_attribute("data-state") == "pending"
    assert card.find_element(By.TAG_NAME, "h3").text == "Approval needed: clip_offer"
    assert card.find_element(By.CSS_SELECTOR, ".approval-who").text == "Asked by Card_keeper (Concierge → Card_keeper)"
    assert card.find_element(By.CSS_SELECTOR, ".approval-reason").text == "Clipping an offer changes the user's card."
    assert card.find_element(By.CSS_SELECTOR, ".approval-args").text == '{\n  "offer": "clip the coffee offer"\n}'
    edit = card.find_element(By.CSS_SELECTOR, "textarea.approval-edit")
    assert edit.get_attribute("value") == '{\n  "offer": "clip the coffee offer"\n}'
    progress = activity(last_turn(driver))
    assert any(p.startswith("‖ Card_keeper finished (interrupted)") for p in progress), progress
    assert not last_turn(driver).find_elements(By.CSS_SELECTOR, ".interrupted"), "a pause is no lost connection"
    assert driver.find_element(By.ID, "announcer").get_attribute("textContent") == "Waiting for your approval of 1 call."
    assert driver.save_screenshot(str(output_dir / "chat-approval.png"))

    card.find_element(By.CSS_SELECTOR, "button.approve").click()
    resumed = resumed_turn(driver, "Approve clip_offer")
    progress = activity(resumed)
    assert any(p.startswith("✓ Card_keeper tool clip_offer finished in ") for p in progress), progress
    # The offline model answers with the tool's result: the best match for the model's words.
    answer = answer_text(resumed, KEEPER)
    assert answer.startswith("Clipped ") and "Coffee [off-0117] to your card" in answer, answer
    card = driver.find_element(By.CSS_SELECTOR, "section.approval")
    assert card.get_attribute("data-state") == "approved"
    assert card.find_element(By.CSS_SELECTOR, ".approval-state").text == "Approved."
    assert card.find_elements(By.CSS_SELECTOR, "button") == [], "an answered card cannot be answered again"


def test_reject_with_a_note_tells_the_agent(driver, approvals_server):
    open_page(driver, approvals_server)
    card = pending_card(driver)
    card.find_element(By.CSS_SELECTOR, "input.approval-note").send_keys("Not that one, please.")
    card.find_element(By.CSS_SELECTOR, "button.reject").click()
    resumed = resumed_turn(driver, "Reject clip_offer: Not that one, please.")
    # The offline model answers with the tool's result: the refusal with the person's words.
    answer = answer_text(resumed, KEEPER)
    assert "rejected_by_user" in answer and "Not that one, please." in answer, answer
    progress = activity(resumed)
    # The refusal is the call's result (the server's tests count that the tool itself never ran).
    assert "✗ Card_keeper tool clip_offer failed" in progress, progress
    card = driver.find_element(By.CSS_SELECTOR, "section.approval")
    assert card.get_attribute("data-state") == "rejected"


def test_an_edit_of_the_editable_fields_runs_and_any_other_is_refused_in_the_page(driver, approvals_server):
    open_page(driver, approvals_server)
    card = pending_card(driver)
    edit = card.find_element(By.CSS_SELECTOR, "textarea.approval-edit")
    edit.clear()
    edit.send_keys('{"offer": "o-1", "card": "mine"}')
    card.find_element(By.CSS_SELECTOR, "button.approve").click()
    error = card.find_element(By.CSS_SELECTOR, ".approval-error")
    assert error.text == "⚠ card cannot be changed: only offer may be changed."
    assert len(turns(driver)) == 1, "nothing was sent"
    edit.clear()
    edit.send_keys("not json")
    card.find_element(By.CSS_SELECTOR, "button.approve").click()
    assert error.text.startswith("⚠ The changes are not valid JSON")
    assert card.find_element(By.CSS_SELECTOR, "button.approve").is_enabled()
    assert len(turns(driver)) == 1, "nothing was sent"

    # An edit the tool's schema refuses is refused by the server (400, naming the field), and the
    # card opens again to fix it.
    edit.clear()
    edit.send_keys('{"offer": 5}')
    card.find_element(By.CSS_SELECTOR, "button.approve").click()
    wait_turns(driver, 2)
    WebDriverWait(driver, WAIT).until(lambda d: card.find_element(By.CSS_SELECTOR, ".approval-error").is_displayed())
    assert "offer" in error.text, error.text
    assert card.get_attribute("data-state") == "pending"
    assert last_turn(driver).find_element(By.CSS_SELECTOR, ".errors .error").text.startswith("⚠ Error (invalid_arguments): ")

    # An allowed edit is what runs: another offer than the model asked for.
    edit.clear()
    edit.send_keys('{"offer": "off-0002"}')
    card.find_element(By.CSS_SELECTOR, "button.approve").click()
    resumed = resumed_turn(driver, 'Approve clip_offer with {"offer":"off-0002"}', n=3)
    answer = answer_text(resumed, KEEPER)
    assert answer.startswith("Clipped ") and "Bagels [off-0002] to your card" in answer, answer
    assert card.get_attribute("data-state") == "approved"


def test_a_reload_while_a_call_waits_shows_its_card_again(driver, approvals_server):
    open_page(driver, approvals_server)
    pending_card(driver)
    driver.refresh()
    WebDriverWait(driver, WAIT).until(lambda d: d.find_elements(By.CSS_SELECTOR, "section.approval"))
    cards = driver.find_elements(By.CSS_SELECTOR, "section.approval")
    assert len(cards) == 1 and len(turns(driver)) == 1
    turn = turns(driver)[0]
    assert turn.find_element(By.CSS_SELECTOR, ".msg.user .text").text == ASK
    assert turn.find_element(By.CSS_SELECTOR, "footer").get_attribute("data-status") == "interrupted"
    assert cards[0].find_element(By.TAG_NAME, "h3").text == "Approval needed: clip_offer"

    cards[0].find_element(By.CSS_SELECTOR, "button.approve").click()
    wait_turns(driver, 2)
    assert wait_footer(driver).get_attribute("data-status") == "ok"
    assert cards[0].get_attribute("data-state") == "approved"


def test_a_new_message_closes_the_waiting_cards_and_their_calls_are_refused_later(driver, approvals_server):
    open_page(driver, approvals_server)
    card = pending_card(driver)
    interrupt = card.get_attribute("data-interrupt")
    episode = driver.find_element(By.ID, "episode").text.removeprefix("Conversation ")
    # The offline model sends any message to clip_offer, so this turn waits for a new approval.
    send_by_keyboard(driver, "never mind, thanks")
    wait_turns(driver, 2)
    wait_footer(driver)
    assert card.get_attribute("data-state") == "dismissed"
    assert card.find_element(By.CSS_SELECTOR, ".approval-state").text == \
        "Not answered: a new message was sent, so this call will not run."
    assert card.find_elements(By.CSS_SELECTOR, "button") == []
    fresh = last_turn(driver).find_elements(By.CSS_SELECTOR, "section.approval")
    assert len(fresh) == 1 and fresh[0].get_attribute("data-state") == "pending"
    assert fresh[0].get_attribute("data-interrupt") != interrupt
    # The server answered the old call as rejected: a resume of it is refused before any stream
    # (404 once the new pause replaced the conversation's approvals, else 409), as the client says.
    code = driver.execute_async_script("""
        const done = arguments[arguments.length - 1];
        import('/baton-client.js').then(async ({BatonClient}) => {
          const client = new BatonClient({endpoint: 'chat', user: 'local', episodeId: arguments[0]});
          try { for await (const _ of client.decide([{interrupt_id: arguments[1], decision: 'approve'}])) {} done('streamed'); }
          catch (e) { done(`${e.status} ${e.code}`); }
        });
    """, episode, interrupt)
    assert code in ("404 interrupt_not_found", "409 interrupt_answered"), code
    approvals_server.stop()
    replies = [m for m in stored(approvals_server.store_path, "local", episode) if m["role"] == "assistant"]
    assert [m["status"] for m in replies] == ["interrupted", "interrupted"], replies
