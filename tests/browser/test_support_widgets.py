"""Forethought's documented answers in the chat page (headless Chromium, real `orchestrator serve`
over the scripted servers): options render as buttons and a click continues the conversation on
the same Forethought conversation; thumbs up rates the answer through the CSAT endpoint; hostile
vendor HTML renders as inert text and runs no script."""

from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from harness import ORCH
from test_chat import WAIT, block_text, last_turn, open_page, send_by_keyboard, wait_footer

SUPPORT = "support[1]"


def rendered(driver, turn, agent):
    """The agent's answer as the page renders it (Markdown): each top-level block's tag and text,
    a list's text being its items."""
    return driver.execute_script("""
        return [...arguments[0].querySelector(`section[data-agent="${arguments[1]}"] .text`).children].map((e) =>
          [e.localName, e.matches('ol, ul') ? [...e.children].map((li) => li.textContent) : e.textContent]);
    """, turn, agent)


def route_to_support(scripts, query):
    scripts.push(ORCH, text="", tool_calls=[{"name": "ask_support", "arguments": {"query": query, "intent_count": 1}}])


def widgets(*components):
    return {"widget_components": list(components), "is_solved": False, "should_escalate": False}


def test_options_render_as_buttons_a_click_continues_and_thumbs_up_rates(driver, own_server, scripts):
    open_page(driver, own_server)
    route_to_support(scripts, "my cashback is missing")
    scripts.push_support(body=widgets({
        "type": "button",
        "message": "<p>Which card is it on?</p>",
        "buttons": [{"display_name": "Visa", "value": "card_visa"}, {"display_name": "Store card", "value": "card_store"}],
        "output_variable": "cv_card",
    }))
    send_by_keyboard(driver, "my cashback is missing")
    wait_footer(driver)
    turn = last_turn(driver)
    assert block_text(turn, SUPPORT).startswith("Which card is it on?")
    assert rendered(driver, turn, SUPPORT) == [["p", "Which card is it on?"], ["ol", ["Visa", "Store card"]]]
    buttons = turn.find_elements(By.CSS_SELECTOR, f'section[data-agent="{SUPPORT}"] .choices button.choice')
    assert [b.text for b in buttons] == ["Visa", "Store card"]

    so_far = scripts.forethought_requests()
    before = len(so_far)
    # The scripted server names the n-th conversation it starts `conv-<n>` (it is shared by the session).
    started = f"conv-{sum(1 for r in so_far if r['method'] == 'POST' and r['path'] == '/solve/api/v1/conversation')}"
    route_to_support(scripts, "Store card")
    scripts.push_support(body=widgets({"type": "text", "message": "<p>Thanks, the store card it is.</p>"}))
    buttons[1].click()
    WebDriverWait(driver, WAIT).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#transcript > li.turn")) == 2)
    wait_footer(driver)
    turn = last_turn(driver)
    assert turn.find_element(By.CSS_SELECTOR, ".msg.user .text").text == "Store card"
    assert block_text(turn, SUPPORT) == "Thanks, the store card it is."
    pick = scripts.forethought_requests()[before]
    assert pick["method"] == "PUT" and pick["path"] == f"/solve/api/v1/conversation/{started}", pick
    assert pick["body"]["context_variables"] == {"cv_card": "card_store"}, pick
    assert all(b.get_attribute("disabled") for b in driver.find_elements(By.CSS_SELECTOR, "button.choice")), \
        "a picked prompt cannot be answered twice"

    helpful = turn.find_element(By.CSS_SELECTOR, f'section[data-agent="{SUPPORT}"] button.rate-up')
    helpful.click()
    WebDriverWait(driver, WAIT).until(
        lambda d: last_turn(d).find_element(By.CSS_SELECTOR, ".rating-note").text == "Thanks for your feedback."
    )
    csat = scripts.forethought_requests()[-1]
    assert csat["path"] == f"/solve/api/v1/conversation/{started}/csat" and csat["body"] == {"rating": 5}, csat


def test_hostile_vendor_html_renders_as_inert_text(driver, server, scripts):
    open_page(driver, server)
    driver.execute_script("window.__pwned = 0;")
    route_to_support(scripts, "hello")
    scripts.push_support(body=widgets(
        {"type": "text", "message": "<p onmouseover=\"window.__pwned=1\">Hi <script>window.__pwned=2</script>"
                                    "<img src=x onerror=\"window.__pwned=3\">there</p>"
                                    "<p><a href=\"javascript:window.__pwned=4\">click me</a></p>"
                                    "<p>&lt;script&gt;window.__pwned=5&lt;/script&gt; &lt;img src=x onerror=window.__pwned=6&gt;</p>"},
        {"type": "button", "message": "<p>Pick</p>", "output_variable": "cv",
         "buttons": [{"display_name": "<img src=x onerror=window.__pwned=7>ok", "value": "v"}]},
    ))
    send_by_keyboard(driver, "hello")
    wait_footer(driver)
    turn = last_turn(driver)
    block = turn.find_element(By.CSS_SELECTOR, f'section[data-agent="{SUPPORT}"]')
    assert rendered(driver, turn, SUPPORT) == [
        ["p", "Hi there"], ["p", "click me"],
        ["p", "<script>window.__pwned=5</script> <img src=x onerror=window.__pwned=6>"],
        ["p", "Pick"], ["ol", ["ok"]],
    ]
    # The markup-looking text is text: no element came of it, and nothing ran.
    assert block.find_elements(By.CSS_SELECTOR, "script, img, a, iframe") == []
    option = block.find_element(By.CSS_SELECTOR, "button.choice")
    assert option.text == "ok"
    driver.execute_script("arguments[0].dispatchEvent(new MouseEvent('mouseover', {bubbles: true}))", block)
    assert driver.execute_script("return window.__pwned") == 0
