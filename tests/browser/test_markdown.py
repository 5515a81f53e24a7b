"""Agents' Markdown in the chat page (headless Chromium, real `orchestrator serve` over the scripted
model server, which streams an answer one word per chunk): lists, emphasis, links and code render
as HTML while the answer streams and when it is whole; hostile answers stay inert; huge ones are
bounded."""

from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from test_chat import WAIT, last_turn, open_page, queue_shopping_turn, send_by_keyboard, wait_footer

SHOPPING = '[data-agent="shopping[1]"] .text'

DEALS = "\n".join([
    "Here are **three coffee deals**:",
    "",
    "- **400 points** on *Brand A* ground coffee",
    "- $1 off `Brand B` pods: [the offer](https://example.com/offers/b)",
    "- a new _weekly_ deal",
    "",
    "Clip them before **Sunday**.",
])


def record_renders(driver):
    """Keeps every state of the shopping block's HTML while the turn streams."""
    driver.execute_script("""
        window.renders = [];
        new MutationObserver(() => {
          const block = document.querySelector(arguments[0]);
          if (block && !document.querySelector('#transcript > li.turn:last-child footer')) window.renders.push(block.innerHTML);
        }).observe(document.getElementById('transcript'), {subtree: true, childList: true, characterData: true});
    """, SHOPPING)


def visible_prose(driver, html):
    """The text a reader sees of `html`, code excluded."""
    return driver.execute_script("""
        const t = document.createElement('template');
        t.innerHTML = arguments[0];
        for (const code of t.content.querySelectorAll('code, pre')) code.remove();
        return t.content.textContent;
    """, html)


def test_an_answer_renders_as_markdown_while_it_streams_and_when_whole(driver, server, scripts, output_dir):
    open_page(driver, server)
    record_renders(driver)
    queue_shopping_turn(scripts, DEALS, chunk_delay_ms=25)
    send_by_keyboard(driver, "find me coffee deals")
    wait_footer(driver)
    block = last_turn(driver).find_element(By.CSS_SELECTOR, SHOPPING)

    items = block.find_elements(By.CSS_SELECTOR, "ul > li")
    assert [li.get_attribute("textContent") for li in items] == [
        "400 points on Brand A ground coffee",
        "$1 off Brand B pods: the offer",
        "a new weekly deal",
    ]
    assert [s.text for s in block.find_elements(By.TAG_NAME, "strong")] == ["three coffee deals", "400 points", "Sunday"]
    assert [e.text for e in block.find_elements(By.TAG_NAME, "em")] == ["Brand A", "weekly"]
    assert block.find_element(By.TAG_NAME, "code").text == "Brand B"
    link = block.find_element(By.TAG_NAME, "a")
    assert link.get_attribute("href") == "https://example.com/offers/b"
    assert link.get_attribute("target") == "_blank"
    assert set(link.get_attribute("rel").split()) == {"noopener", "noreferrer", "nofollow"}
    assert "**" not in block.get_attribute("textContent")

    renders = driver.execute_script("return window.renders")
    assert len(renders) > 10, f"the answer rendered as it streamed ({len(renders)} renders)"
    for html in renders:
        prose = visible_prose(driver, html)
        assert "*" not in prose and "`" not in prose and "](" not in prose and "[the" not in prose, html
    # A half-received list was already a list: one item, then two, before the answer was whole.
    half = [html for html in renders if html.count("<li>") in (1, 2) and "<ul>" in html]
    assert half, "a half-streamed list rendered as a list"
    assert "Sunday" not in half[0]
    assert driver.save_screenshot(str(output_dir / "chat-markdown.png"))


HOSTILE = "\n\n".join([
    "<script>window.__pwned = 'script'</script>",
    '<img src="x" onerror="window.__pwned = \'img\'">',
    "[click me](javascript:window.__pwned='link') and [again](JaVaScRiPt:window.__pwned='case')",
    "[data](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==) and <javascript:window.__pwned='auto'>",
    '<a href="javascript:window.__pwned=\'a\'" onclick="window.__pwned=\'click\'">raw link</a>',
    "![pixel](https://tracker.example/p.png?q=secret) and [ok](https://example.com)",
    '<svg onload="window.__pwned=\'svg\'"></svg><iframe src="javascript:window.__pwned=\'frame\'"></iframe>',
])


def test_hostile_markdown_is_inert(driver, server, scripts):
    open_page(driver, server)
    queue_shopping_turn(scripts, HOSTILE)
    send_by_keyboard(driver, "find me coffee deals")
    wait_footer(driver)
    block = last_turn(driver).find_element(By.CSS_SELECTOR, SHOPPING)
    for anchor in block.find_elements(By.TAG_NAME, "a"):
        anchor.click()  # a link without a safe href does nothing; a safe one opens a new tab
    driver.switch_to.window(driver.window_handles[0])
    assert driver.execute_script("return window.__pwned") is None, "no script ran"

    found = driver.execute_script("""
        const block = document.querySelector(arguments[0]);
        const all = [...block.querySelectorAll('*')];
        return {
          tags: [...new Set(all.map((e) => e.localName))].sort(),
          handlers: all.flatMap((e) => [...e.attributes].map((a) => a.name)).filter((n) => n.startsWith('on')),
          hrefs: [...block.querySelectorAll('a[href]')].map((a) => a.getAttribute('href')),
        };
    """, SHOPPING)
    assert not {"script", "img", "svg", "iframe"} & set(found["tags"]), found["tags"]
    assert found["handlers"] == []
    # Only the safe links keep an href: the image became a link a person has to click.
    assert found["hrefs"] == ["https://tracker.example/p.png?q=secret", "https://example.com"], found["hrefs"]
    # Raw HTML is shown as the text it is; unsafe links keep their words.
    text = block.get_attribute("textContent")
    assert "<script>window.__pwned = 'script'</script>" in text
    assert "click me" in text and "raw link" in text
    assert len(driver.window_handles) >= 1
    for handle in driver.window_handles[1:]:
        driver.switch_to.window(handle)
        driver.close()
    driver.switch_to.window(driver.window_handles[0])


def test_a_huge_or_deeply_nested_answer_is_bounded(driver, server, scripts):
    open_page(driver, server)
    # 28 KB of list items streamed one word per chunk (the server caps an answer at 32,000 chars).
    lines = [f"- **item {i}** with [a link](https://example.com/{i})" for i in range(540)]
    queue_shopping_turn(scripts, "\n".join(lines))
    send_by_keyboard(driver, "find me coffee deals")
    wait_footer(driver)
    items = driver.execute_script("return document.querySelectorAll(arguments[0] + ' li').length", SHOPPING)
    assert items == 540

    # Past MAX_MARKDOWN_CHARS (an agent that writes more than one model answer), the page's own
    # renderer shows the first part as Markdown, whole items, and the rest as plain text.
    shape = driver.execute_async_script("""
        const done = arguments[arguments.length - 1];
        import('/markdown.js').then((m) => {
          const source = Array.from({length: 1200}, (_, i) => `- **item ${i}** with [a link](https://example.com/${i})`).join('\\n');
          const out = document.createElement('div');
          out.append(m.renderMarkdown(source));
          done({length: source.length, bound: m.MAX_MARKDOWN_CHARS, items: out.querySelectorAll('li').length,
                plain: out.querySelector('.md-plain')?.textContent ?? '', text: out.textContent});
        });
    """)
    assert shape["length"] > shape["bound"]
    assert 500 < shape["items"] < 1200, shape["items"]
    assert shape["plain"].startswith(f"- **item {shape['items']}** with"), shape["plain"][:80]
    assert shape["plain"].endswith("- **item 1199** with [a link](https://example.com/1199)")
    assert shape["text"].count("item ") == 1200, "nothing lost"

    deep = ">" * 20000 + " deep"
    queue_shopping_turn(scripts, deep)
    send_by_keyboard(driver, "more")
    WebDriverWait(driver, WAIT).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#transcript > li.turn")) == 2)
    wait_footer(driver)
    block = last_turn(driver).find_element(By.CSS_SELECTOR, SHOPPING)
    assert block.find_element(By.CSS_SELECTOR, ".md-plain").get_attribute("textContent") == deep

    # The slowest input measured in Node (`**a` repeated), at the bound, renders in bounded time.
    took = driver.execute_async_script("""
        const done = arguments[arguments.length - 1];
        import('/markdown.js').then((m) => {
          const started = performance.now();
          m.renderMarkdown('**a'.repeat(m.MAX_MARKDOWN_CHARS / 3 + 1000));
          done(performance.now() - started);
        });
    """)
    print(f"worst-case render at the bound: {took:.0f} ms")
    assert took < 5000, took
