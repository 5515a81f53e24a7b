// Agents' answers as Markdown: parsed by marked, sanitised by DOMPurify (both vendored, pinned:
// web/vendor/README.md), re-rendered as the text streams in.
//
// The policy, in the order it is applied:
// - Raw HTML in the source is shown as text, never as markup (an answer that says `<b>` shows
//   `<b>`). Images are shown as links (a click away, so an answer cannot make the browser fetch a
//   URL it chose by just being shown). Everything marked produces then goes through DOMPurify with
//   an allowlist of the tags Markdown makes and no `class`, `style` or `id`; a link keeps its
//   `href` only for `http:`, `https:` and `mailto:` (no `javascript:`, no `data:`), and opens in a
//   new tab with `rel="noopener noreferrer nofollow"`. The sanitiser returns DOM nodes, never an
//   HTML string that the page would parse again.
// - Bounded: the first MAX_MARKDOWN_CHARS characters are Markdown, the rest plain text (marked's
//   time grows faster than linearly on hostile input); a source marked cannot parse (nesting too
//   deep) is shown as plain text. `MarkdownView` renders at most once per task and spaces renders
//   by four times what the last one took, so a huge answer cannot freeze the page.
// - Streaming-safe: while an answer streams, `repairPartial` closes what the tail has opened (`**`,
//   `*`, `_`, `~~`, a code span), shows an unfinished link as its text, and holds back a last line
//   that is only a list, heading or rule marker, so a half-received answer never flashes raw `**`
//   or turns a line into a heading for one frame. The finished answer is rendered as it is.

import { Marked } from "./vendor/marked.esm.js";
import createDOMPurify from "./vendor/purify.es.mjs";

/** How much of one answer is rendered as Markdown; the rest is plain text. */
export const MAX_MARKDOWN_CHARS = 32 * 1024;

const escapeHtml = (s) =>
  s.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);

const marked = new Marked({
  gfm: true,
  breaks: true, // a single newline is a line break, as chat answers mean it
  renderer: {
    // Raw HTML is text; a block of it is a paragraph of its lines.
    html: ({ text, block }) => (block ? `<p>${escapeHtml(text.trim()).replace(/\n/g, "<br>")}</p>\n` : escapeHtml(text)),
    image: ({ href, text }) => `<a href="${escapeHtml(href ?? "")}">${escapeHtml(text || href || "image")}</a>`,
  },
});

/**
 * The HTML marked makes of `source` (not yet sanitised): with `partial`, of the source repaired
 * as a streaming tail (`repairPartial`). Throws what marked throws (RangeError on deep nesting).
 */
export function markdownHtml(source, { partial = false } = {}) {
  return marked.parse(partial ? repairPartial(source) : source);
}

// A line that starts a block of its own: emphasis and code spans never run across it.
const BLOCK_START = /^ {0,3}(?:[-*+] |\d{1,9}[.)] |#{1,6} |> ?|\|)/;
// A fence: ``` or ~~~ at the start of a line.
const FENCE = /^ {0,3}(`{3,}|~{3,})/;
// A last line that is only a marker (a list bullet, a number, a heading, a rule, a setext
// underline, a quote), whose meaning the next characters decide.
const LONE_MARKER = /^\s*(?:[-*+=_#>~`]+|\d{1,9}[.)]?)\s*$/;

/**
 * Repairs the tail of a half-received Markdown source so it renders as it will once finished:
 * the emphasis, strike-through and code span its last block opened are closed, an unfinished link
 * (`[text`, `[text]`, `[text](http://exa`) becomes its text, emphasis markers at the very end are
 * dropped, and a last line that is only a marker is held back. Inside an unclosed code fence
 * nothing is changed (marked renders it as code to the end). A pure function.
 *
 * @param {string} source
 * @returns {string}
 */
export function repairPartial(source) {
  const lines = source.split("\n");
  let fence = null;
  let blockStart = 0; // index of the line where the last block began
  for (let i = 0; i < lines.length; i++) {
    const f = lines[i].match(FENCE);
    if (fence) {
      if (f && f[1][0] === fence[0] && f[1].length >= fence.length && lines[i].trim() === f[1]) {
        fence = null;
        blockStart = i + 1;
      }
    } else if (f) {
      fence = f[1];
    } else if (lines[i].trim() === "" || BLOCK_START.test(lines[i])) {
      blockStart = lines[i].trim() === "" ? i + 1 : i;
    }
  }
  if (fence) return source;
  let last = lines.pop();
  if (LONE_MARKER.test(last)) {
    last = "";
  }
  let block = [...lines.slice(blockStart), last].join("\n");
  const head = lines.slice(0, Math.min(blockStart, lines.length));
  block = unfinishedLink(block).replace(/(?:\s*[*_~`]+)+$/, "").trimEnd();
  const closers = openMarkers(block);
  return [...head, block + closers].join("\n");
}

/** `[text`, `[text]` or `[text](partial-url` at the end of `block`, shown as `text`. */
function unfinishedLink(block) {
  const m = block.match(/!?\[([^\]\n]*)(?:\]|\]\([^)\s]*(?:\s+"[^"]*"?)?)?$/);
  // Only where a link can start: `array[0]` or an escaped `\[` is text.
  if (!m || (m.index > 0 && !/[\s(*_~]/.test(block[m.index - 1]))) return block;
  return block.slice(0, m.index) + m[1];
}

/**
 * The closers of what `block` left open, innermost first: a code span's backticks, or the
 * emphasis (`*`, `**`, `_`, `__`) and strike-through (`~~`) runs that opened and did not close.
 * CommonMark's flanking rules, simplified: a run followed by a space does not open, one after a
 * space does not close, and `_` inside a word does neither. `block` is one block (its lines after
 * the first start no block of their own), so nothing it opened was closed by a block end.
 */
function openMarkers(block) {
  const stack = [];
  let code = 0; // the length of the backtick run that opened a code span, 0 outside one
  for (let i = 0; i < block.length; ) {
    const c = block[i];
    if (c === "\\" && !code) {
      i += 2;
      continue;
    }
    let j = i;
    while (j < block.length && block[j] === c) j++;
    const run = j - i;
    if (c === "`") {
      if (!code) code = run;
      else if (code === run) code = 0;
    } else if (!code && (c === "*" || c === "_" || c === "~")) {
      const before = i > 0 ? block[i - 1] : " ";
      const after = j < block.length ? block[j] : " ";
      const word = (ch) => /[\p{L}\p{N}]/u.test(ch);
      let closes = !/\s/.test(before);
      let opens = !/\s/.test(after);
      if (c === "_") {
        closes &&= !word(after);
        opens &&= !word(before);
      }
      const parts = c === "~" ? (run >= 2 ? ["~~"] : []) : [...(run >= 2 ? [c + c] : []), ...(run % 2 ? [c] : [])];
      for (const part of parts) {
        const at = stack.lastIndexOf(part);
        if (closes && at >= 0) stack.splice(at);
        else if (opens) stack.push(part);
      }
    }
    i = j;
  }
  if (code) return "`".repeat(code);
  return stack.reverse().join("");
}

// DOMPurify needs a window: made on first use, so this module also loads in Node (for its tests).
let purify = null;
const SAFE_HREF = /^(?:https?:|mailto:)/i;
const PURIFY_CONFIG = {
  ALLOWED_TAGS: [
    "p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "strong", "em", "del", "code", "pre",
    "blockquote", "ul", "ol", "li", "a", "table", "thead", "tbody", "tr", "th", "td", "input",
  ],
  ALLOWED_ATTR: ["href", "title", "start", "align", "type", "checked", "disabled"],
  ALLOWED_URI_REGEXP: SAFE_HREF,
  RETURN_DOM_FRAGMENT: true,
};

function sanitizer() {
  if (purify) return purify;
  purify = createDOMPurify(window);
  purify.addHook("afterSanitizeAttributes", (node) => {
    if (node.nodeName === "A") {
      if (SAFE_HREF.test(node.getAttribute("href") ?? "")) {
        node.setAttribute("target", "_blank");
        node.setAttribute("rel", "noopener noreferrer nofollow");
      } else {
        node.removeAttribute("href");
      }
    } else if (node.nodeName === "INPUT") {
      // A task list's checkbox, shown but never editable; any other input goes.
      if (node.getAttribute("type") === "checkbox") node.setAttribute("disabled", "");
      else node.remove();
    }
  });
  return purify;
}

function plain(text) {
  const p = document.createElement("p");
  p.className = "md-plain";
  p.textContent = text;
  return p;
}

/**
 * `source` rendered as sanitised DOM nodes (a DocumentFragment), `partial` while it still
 * streams. Never throws: what cannot be rendered is plain text.
 */
export function renderMarkdown(source, { partial = false } = {}) {
  let head = source;
  let tail = "";
  if (source.length > MAX_MARKDOWN_CHARS) {
    const cut = source.lastIndexOf("\n", MAX_MARKDOWN_CHARS);
    const at = cut > 0 ? cut : MAX_MARKDOWN_CHARS;
    head = source.slice(0, at);
    tail = source.slice(at);
    partial = false; // the streaming tail is in the plain part
  }
  let fragment;
  try {
    fragment = sanitizer().sanitize(markdownHtml(head, { partial }), PURIFY_CONFIG);
  } catch {
    fragment = document.createDocumentFragment();
    fragment.append(plain(head));
  }
  // Whitespace between blocks is the HTML's formatting, not the answer's.
  for (const node of [...fragment.childNodes]) {
    if (node.nodeType === Node.TEXT_NODE && !node.data.trim()) node.remove();
  }
  if (tail.trim()) fragment.append(plain(tail.replace(/^\n/, "")));
  return fragment;
}

/** Replaces `element`'s children with `fragment`'s, keeping the leading ones that did not change. */
function patch(element, fragment) {
  const next = [...fragment.childNodes];
  const old = [...element.childNodes];
  let same = 0;
  while (same < next.length && same < old.length && old[same].isEqualNode(next[same])) same++;
  for (const node of old.slice(same)) node.remove();
  element.append(...next.slice(same));
}

/**
 * One answer's Markdown in `element`, re-rendered as its source grows: `set(source)` while it
 * streams (rendered soon, repaired as a partial tail), `finish()` once it is whole (rendered now,
 * as it is). Renders are at most one per task and spaced by four times the last one's duration.
 */
export class MarkdownView {
  constructor(element) {
    this.element = element;
    this.element.classList.add("markdown");
    this.source = "";
    this.timer = null;
    this.nextAt = 0;
  }

  set(source) {
    this.source = source;
    if (this.timer !== null) return;
    const wait = Math.max(0, this.nextAt - performance.now());
    this.timer = setTimeout(() => {
      this.timer = null;
      this.render(true);
    }, wait);
  }

  finish() {
    clearTimeout(this.timer);
    this.timer = null;
    this.render(false);
  }

  render(partial) {
    const started = performance.now();
    patch(this.element, renderMarkdown(this.source, { partial }));
    const took = performance.now() - started;
    this.nextAt = performance.now() + Math.min(4 * took, 2000);
  }
}
