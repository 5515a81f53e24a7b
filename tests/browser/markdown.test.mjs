// The Markdown rendering of agents' answers (web/markdown.js), the parts that need no DOM: the
// repair of a half-received answer, the HTML marked makes under the page's policy, and the
// vendored libraries being the pinned ones. The sanitiser and the page are tested in Chromium
// (tests/browser/test_markdown.py). Run: node --test tests/browser/
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";

import { markdownHtml, repairPartial } from "../../web/markdown.js";

const ANSWER = [
  "Here are **three coffee deals** for you:",
  "",
  "- **400 points** on *Brand A* ground coffee",
  "- $1 off `Brand B` pods, see [the offer](https://example.com/offers/b?ref=1)",
  "- ~~expired~~ a new _weekly_ deal",
  "",
  "1. Open the app",
  "2. Tap **Offers**",
  "",
  "```",
  "code stays **as is**",
  "```",
  "",
  "> Clip them before *Sunday*.",
].join("\n");

/** The text of `html` outside `<code>` and `<pre>`, tags removed. */
function visibleProse(html) {
  return html.replace(/<pre>[\s\S]*?<\/pre>/g, "").replace(/<code>[\s\S]*?<\/code>/g, "").replace(/<[^>]+>/g, "");
}

test("every prefix of a streamed answer renders without raw emphasis markers or link syntax", () => {
  for (let n = 1; n <= ANSWER.length; n++) {
    const prose = visibleProse(markdownHtml(ANSWER.slice(0, n), { partial: true }));
    const where = `after ${n} characters: ${JSON.stringify(ANSWER.slice(0, n).slice(-30))}`;
    assert.doesNotMatch(prose, /\*|~~|`/, where);
    assert.doesNotMatch(prose, /\]\(|\[the/, where);
    assert.doesNotMatch(prose, /(^|\s)_\w/, where);
  }
});

test("the finished answer renders as written", () => {
  const html = markdownHtml(ANSWER);
  assert.match(html, /<li><strong>400 points<\/strong> on <em>Brand A<\/em> ground coffee<\/li>/);
  assert.match(html, /<a href="https:\/\/example.com\/offers\/b\?ref=1">the offer<\/a>/);
  assert.match(html, /<ol>\n<li>Open the app<\/li>/);
  assert.match(html, /<pre><code>code stays \*\*as is\*\*\n<\/code><\/pre>/);
  assert.match(html, /<del>expired<\/del> a new <em>weekly<\/em>/);
  assert.match(html, /<blockquote>/);
});

test("a half-received list is a list, and a line that is only a marker is held back", () => {
  assert.match(markdownHtml("Deals:\n\n- one\n- tw", { partial: true }), /<ul>\n<li>one<\/li>\n<li>tw<\/li>\n<\/ul>/);
  // `-` alone under a line would make it a heading for a moment; a bare number, a list.
  assert.equal(markdownHtml("Deals:\n-", { partial: true }), "<p>Deals:</p>\n");
  assert.equal(markdownHtml("Deals:\n1", { partial: true }), "<p>Deals:</p>\n");
  assert.equal(repairPartial("Deals:\n- "), "Deals:\n");
});

test("unclosed emphasis, strike-through and code spans are closed innermost first", () => {
  assert.equal(repairPartial("Hello **bo"), "Hello **bo**");
  assert.equal(repairPartial("**bold *and it"), "**bold *and it***");
  assert.equal(repairPartial("~~gone"), "~~gone~~");
  assert.equal(repairPartial("run `cargo te"), "run `cargo te`");
  assert.equal(repairPartial("a ``tick ` inside"), "a ``tick ` inside``");
  assert.equal(repairPartial("snake_case and _it"), "snake_case and _it_");
  // Markers with nothing after them yet are dropped, not closed over nothing.
  assert.equal(repairPartial("and then **"), "and then");
  // Closed ones, a lone star between spaces and escaped markers are left alone.
  assert.equal(repairPartial("**done** and 2 * 3"), "**done** and 2 * 3");
  assert.equal(repairPartial("not \\*emphasis"), "not \\*emphasis");
  // Nothing carries across a block: the list item's own `**` is closed, not the paragraph's.
  assert.equal(repairPartial("Intro\n\n- **tw"), "Intro\n\n- **tw**");
});

test("an unfinished link shows its text until its URL is whole", () => {
  assert.equal(repairPartial("see [the do"), "see the do");
  assert.equal(repairPartial("see [the docs]"), "see the docs");
  assert.equal(repairPartial("see [the docs](https://exa"), "see the docs");
  assert.equal(repairPartial("see ![a chart](https://exa"), "see a chart");
  assert.equal(repairPartial("[a](https://a.example) then"), "[a](https://a.example) then");
  assert.equal(repairPartial("array[0]"), "array[0]", "a subscript is not a link");
});

test("inside an unclosed code fence nothing is repaired", () => {
  const source = "```js\nconst a = **b";
  assert.equal(repairPartial(source), source);
  assert.match(markdownHtml(source, { partial: true }), /<pre><code class="language-js">const a = \*\*b\n<\/code><\/pre>/);
});

test("raw HTML in an answer is text, and an image is only a link", () => {
  const html = markdownHtml('<script>window.__pwned=1</script>\n\nhi <img src=x onerror="alert(1)"> ![pic](https://t.example/p.png)');
  assert.doesNotMatch(html, /<script|<img/);
  assert.match(html, /&lt;script&gt;window.__pwned=1&lt;\/script&gt;/);
  assert.match(html, /&lt;img src=x onerror=&quot;alert\(1\)&quot;&gt;/);
  assert.match(html, /<a href="https:\/\/t.example\/p.png">pic<\/a>/);
});

test("repairing a long streamed answer stays fast", () => {
  const long = `${ANSWER}\n\n`.repeat(60);
  const started = performance.now();
  for (let n = long.length - 200; n <= long.length; n++) repairPartial(long.slice(0, n));
  const perCall = (performance.now() - started) / 200;
  assert.ok(perCall < 5, `repairPartial took ${perCall.toFixed(2)} ms per call on ${long.length} characters`);
});

test("the vendored libraries are the pinned files", () => {
  const readme = readFileSync(new URL("../../web/vendor/README.md", import.meta.url), "utf8");
  const pins = [...readme.matchAll(/^([0-9a-f]{64}) {2}(\S+)$/gm)];
  assert.deepEqual(pins.map((m) => m[2]).sort(), ["marked.esm.js", "purify.es.mjs"]);
  for (const [, sha, file] of pins) {
    const bytes = readFileSync(new URL(`../../web/vendor/${file}`, import.meta.url));
    assert.equal(createHash("sha256").update(bytes).digest("hex"), sha, file);
  }
});
