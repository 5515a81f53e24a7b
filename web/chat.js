// The chat page: renders each turn's events as they stream (see docs/web-client.md).
//
// One turn is one <li> of the transcript: the user's message, the orchestrator's preamble, one
// block per answering agent (created at its first text, so blocks appear in the order agents
// speak), an activity list (agents and tools starting and finishing), in-band errors, and a
// footer from `completed`. A dropped connection is rejoined by the client where it stopped (the
// turn says "Replaying…" meanwhile; no event is shown twice); only when that fails does the turn
// offer a retry, which re-renders it from scratch. Stop asks the server to cancel the turn
// (`POST chat/{episode}/turns/{turn}/cancel`) and the turn ends with its `completed` `cancelled`.
//
// Agents' text is Markdown, rendered by `markdown.js` (parsed, then sanitised into DOM nodes; raw
// HTML shows as text; re-rendered as it streams, its unfinished tail repaired). The user's own
// words are set as text (`textContent`), never as markup. `choices` adds a button per
// option under the agent's text; a click sends the option's label as the next message. An answer
// whose `answer_meta` carries a `feedback_ref` gets thumbs up and down, which rate it
// (`POST chat/{episode}/csat`) once the turn has completed; `handoff` adds a note.
//
// The episode id is kept in the tab's sessionStorage, so a reload shows the conversation again: the
// page reads it back (`GET chat/{episode}/messages`, newest page first) and renders each stored
// turn, with "Show earlier messages" for older pages; then the next message continues it. A turn
// still running (`running_turn`) is rejoined from its first event and streams to its end.
//
// A tool call that waits for a person's approval (`approval_required`) is a card in its turn
// (`approvals.js`); Approve or Reject sends the decision (`BatonClient.decide`, the resume request)
// and the resumed turn streams below as a turn of its own. A turn that ended `interrupted` lists
// what waits in `completed.interrupts`, and after a reload the messages page does (`interrupts`),
// so the cards come back. A new message answers waiting calls as rejected on the server, so
// sending one closes the cards.

import { BatonClient, BatonHttpError, BatonStreamError, newRequestId } from "./baton-client.js";
import { ApprovalCard } from "./approvals.js";
import { agentLabel, el } from "./dom.js";
import { MarkdownView } from "./markdown.js";

const $ = (id) => document.getElementById(id);
const form = $("composer");
const input = $("message");
const sendButton = $("send");
const stopButton = $("stop");
const transcript = $("transcript");
const announcer = $("announcer");
const episodeLabel = $("episode");

const params = new URLSearchParams(location.search);
const client = new BatonClient({
  endpoint: params.get("endpoint") ?? "chat",
  user: params.get("user") ?? "local",
});
$("endpoint").value = client.endpoint;
$("user").value = client.user;
$("endpoint").addEventListener("change", (e) => (client.endpoint = e.target.value.trim() || "chat"));
$("user").addEventListener("change", (e) => (client.user = e.target.value.trim() || undefined));
// The token stays in memory only: it is never written to storage.
$("token").addEventListener("change", (e) => (client.token = e.target.value.trim() || undefined));

// The page can rejoin a turn, so it asks the server to run turns to their end when the connection drops.
client.onDisconnect = "continue";
const STOP_GRACE_MS = 15000; // after a stop was accepted, how long `completed` may take to arrive

let running = null; // { controller, view, stopping } while a turn streams

function announce(text) {
  // A fresh text node each time so screen readers speak repeated messages too.
  announcer.textContent = "";
  announcer.append(document.createTextNode(text));
}

function seconds(ms) {
  return ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(2)} s`;
}

// The conversation of this tab, per endpoint and user, kept across reloads (not across tabs).
const episodeKey = () => `baton.episode:${client.endpoint}:${client.user ?? ""}`;
function keptEpisode() {
  try {
    return sessionStorage.getItem(episodeKey());
  } catch {
    return null; // storage disabled: every load starts a new conversation
  }
}

function updateEpisode() {
  episodeLabel.textContent = client.episodeId ? `Conversation ${client.episodeId}` : "New conversation";
  try {
    if (client.episodeId) sessionStorage.setItem(episodeKey(), client.episodeId);
    else sessionStorage.removeItem(episodeKey());
  } catch {
    // Storage disabled: the conversation is not restored after a reload.
  }
}

/** The rendering of one turn; `reset()` empties it for a retry. */
class TurnView {
  /** A turn showing `message`, placed before `before` (a turn's <li>) or at the end. */
  constructor(message, before = null) {
    this.root = el("li", { class: "turn" });
    this.userText = el("p", { class: "text" }, message);
    this.root.append(el("div", { class: "msg user" }, el("span", { class: "who" }, "You"), this.userText));
    this.reply = el("div", { class: "reply" });
    this.root.append(this.reply);
    transcript.insertBefore(this.root, before);
    this.reset();
  }

  reset() {
    this.reply.replaceChildren();
    this.status = el("p", { class: "turn-status", role: "status" }, "Sending…");
    this.preamble = null;
    this.blocks = new Map(); // agent instance → { section, text }
    this.activityList = el("ol", { class: "activity-list" });
    this.activity = el(
      "details",
      { class: "activity", open: true },
      el("summary", {}, "Activity"),
      this.activityList,
    );
    this.answers = el("div", { class: "answers" });
    this.errors = el("div", { class: "errors" });
    // Cards outlive a reset (a re-rendered turn shows its cards again by id, replacing these).
    this.approvals ??= el("div", { class: "approvals" });
    this.footer = null;
    this.replay = null; // the "Replaying…" note after a dropped connection
    this.reconnects = 0; // dropped connections rejoined
    this.reply.append(this.status, this.answers, this.approvals, this.errors, this.activity);
    this.activity.hidden = true;
  }

  /** Shows what a dropped connection's recovery does (`state`: reconnecting, replaying, replayed). */
  replaying(state, text) {
    if (!this.replay) {
      this.replay = el("p", { class: "replaying", role: "status" });
      this.status.after(this.replay);
    }
    this.replay.dataset.state = state;
    this.replay.textContent = text;
  }

  setStatus(text) {
    this.status.textContent = text;
    this.status.hidden = !text;
  }

  block(agent) {
    let b = this.blocks.get(agent);
    if (b) return b;
    const text = el("div", { class: "text" });
    const isOrchestrator = agent === "orchestrator";
    const section = el(
      "section",
      { class: isOrchestrator ? "agent preamble" : "agent", "data-agent": agent, "aria-label": agentLabel(agent) },
      el("h3", { class: "who" }, agentLabel(agent)),
      text,
    );
    this.answers.append(section);
    b = { section, text, said: "", announced: false, markdown: new MarkdownView(text) };
    this.blocks.set(agent, b);
    return b;
  }

  /** The options of a `choices` event as buttons that send the picked label. */
  choices(ev) {
    const b = this.block(ev.agent);
    const group = el("div", { class: "choices", role: "group", "aria-label": ev.prompt || "Options" });
    for (const option of ev.options ?? []) {
      const button = el("button", { type: "button", class: "choice" }, option.label);
      button.addEventListener("click", () => {
        if (running) return;
        for (const other of group.querySelectorAll("button")) other.disabled = true;
        button.setAttribute("aria-pressed", "true");
        send(option.label);
      });
      group.append(button);
    }
    if ((ev.fields ?? []).length) {
      group.append(el("p", { class: "hint" }, `Reply with: ${ev.fields.map((f) => f.label).join(", ")}${ev.fields.length > 1 ? " (one per line)" : ""}.`));
    }
    b.section.append(group);
  }

  /** Thumbs up and down for an answer that can be rated (usable once the turn completed). */
  rating(ev) {
    if (!ev.meta?.feedback_ref) return;
    const b = this.block(ev.agent);
    if (b.rating) return;
    const note = el("span", { class: "rating-note", role: "status" });
    const buttons = [
      ["up", "👍", "Helpful"],
      ["down", "👎", "Not helpful"],
    ].map(([rating, icon, label]) => {
      const button = el("button", { type: "button", class: `rate rate-${rating}`, "aria-label": label, title: label, disabled: true }, `${icon} ${label}`);
      button.addEventListener("click", async () => {
        for (const other of buttons) other.disabled = true;
        note.textContent = "Sending…";
        try {
          await client.rate(this.turnId ?? null, rating);
          button.setAttribute("aria-pressed", "true");
          note.textContent = "Thanks for your feedback.";
        } catch (e) {
          note.textContent = `Not sent: ${e?.message ?? e}`;
          for (const other of buttons) other.disabled = false;
        }
      });
      return button;
    });
    b.rating = el("div", { class: "rating", role: "group", "aria-label": "Rate this answer" }, ...buttons, note);
    b.section.append(b.rating);
  }

  handoff(ev) {
    const b = this.block(ev.agent);
    b.section.append(el("p", { class: "handoff", role: "note" }, "This assistant suggests talking to a person."));
  }

  progress(line, kind) {
    this.activity.hidden = false;
    this.activityList.append(el("li", { class: `progress ${kind}` }, line));
  }

  /** Reads the block's finished text (as rendered) out to screen readers, once. */
  announceBlock(agent) {
    const b = this.blocks.get(agent);
    if (b && !b.announced && b.said.trim()) {
      b.announced = true;
      announce(`${agentLabel(agent)}: ${b.text.textContent}`);
    }
  }

  /** Renders every block's text as final (the turn ended, however it ended). */
  settle() {
    for (const b of this.blocks.values()) b.markdown.finish();
  }

  error(agent, code, message, retryable) {
    this.errors.append(
      el(
        "p",
        { class: "error", role: "alert" },
        el("strong", {}, "⚠ Error"),
        ` (${code}${agent ? `, ${agentLabel(agent)}` : ""}): ${message}`,
        retryable ? " You can try again." : "",
      ),
    );
  }

  render(ev) {
    switch (ev.type) {
      case "thinking":
        this.setStatus("Thinking…");
        break;
      case "text": {
        this.setStatus("");
        const b = this.block(ev.agent);
        b.said += ev.text;
        b.markdown.set(b.said);
        break;
      }
      case "reasoning": {
        const b = this.block(ev.agent);
        b.reasoning ??= b.section.insertBefore(
          el("details", { class: "reasoning" }, el("summary", {}, "Reasoning"), el("p", {})),
          b.text,
        );
        b.reasoning.lastChild.textContent += ev.text;
        break;
      }
      case "agent_started":
        this.progress(`▶ ${agentLabel(ev.agent)} started: “${ev.query}”`, "started");
        break;
      case "agent_finished": {
        const tokens = (ev.usage?.input_tokens ?? 0) + (ev.usage?.output_tokens ?? 0);
        const mark = { ok: "✓", interrupted: "‖" }[ev.status] ?? "✗";
        this.progress(
          `${mark} ${agentLabel(ev.agent)} finished (${ev.status}) in ${seconds(ev.duration_ms)}, ${tokens} tokens`,
          `finished status-${ev.status}`, // not the bare status: `.interrupted` is the lost-turn note
        );
        this.blocks.get(ev.agent)?.markdown.finish();
        this.announceBlock(ev.agent);
        break;
      }
      case "tool_call_start":
        this.progress(`▶ ${agentLabel(ev.agent)} tool ${ev.name} started`, "started");
        break;
      case "tool_call_progress": {
        const of = ev.total != null ? `${ev.progress}/${ev.total}` : `${ev.progress}`;
        const note = ev.message ? `: ${ev.message}` : "";
        this.progress(`… ${agentLabel(ev.agent)} tool ${ev.name} ${of}${note}`, "progress");
        break;
      }
      case "tool_result":
        if (ev.is_error) this.progress(`✗ ${agentLabel(ev.agent)} tool ${ev.name} failed`, "failed");
        break;
      case "tool_call_end":
        this.progress(`✓ ${agentLabel(ev.agent)} tool ${ev.name} finished in ${seconds(ev.duration_ms)}`, "finished");
        break;
      case "mini_agent.decomposed":
        this.progress(`${agentLabel(ev.parent)} split the request into ${ev.count} parts`, "started");
        break;
      case "mini_agent.started":
        this.progress(`▶ ${agentLabel(ev.parent)} part ${ev.mini_id} started: “${ev.description}”`, "started");
        break;
      case "mini_agent.finished":
        this.progress(`${ev.status === "ok" ? "✓" : "✗"} ${agentLabel(ev.parent)} part ${ev.mini_id} ${ev.status === "timeout" ? "timed out" : ev.status === "ok" ? "answered" : "failed"} in ${seconds(ev.duration_ms)}`, "finished");
        break;
      case "mini_agent.aggregated": {
        const ok = ev.outcomes.filter((o) => o.status === "ok").length;
        this.progress(`${agentLabel(ev.parent)} combined the parts (${ok} of ${ev.outcomes.length} answered)`, "finished");
        break;
      }
      case "choices":
        this.choices(ev);
        break;
      case "approval_required":
        this.approval(ev);
        announce(`Approval needed: ${agentLabel(ev.agent)} wants to call ${ev.tool}.`);
        break;
      case "answer_meta":
        this.rating(ev);
        break;
      case "handoff":
        this.handoff(ev);
        break;
      case "error":
        this.error(ev.agent, ev.code, ev.message, ev.retryable);
        announce(`Error: ${ev.message}`);
        break;
      case "completed":
        this.complete(ev);
        break;
      default:
        // response_id, usage and events added later: nothing to show.
        break;
    }
  }

  /** A card for a call waiting for approval (replacing one shown for it before). */
  approval(interrupt) {
    pendingCards.get(interrupt.interrupt_id)?.root.remove();
    const card = new ApprovalCard(interrupt, { label: agentLabel, onDecide: decide });
    pendingCards.set(card.id, card);
    this.approvals.append(card.root);
  }

  complete(ev) {
    this.settle();
    for (const interrupt of ev.interrupts ?? []) {
      if (!this.approvals.querySelector(`[data-interrupt="${CSS.escape(interrupt.interrupt_id)}"]`)) this.approval(interrupt);
    }
    this.setStatus("");
    if (this.replay) {
      const n = this.reconnects;
      this.replaying(
        "replayed",
        n
          ? `↻ Rejoined after ${n === 1 ? "a lost connection" : `${n} lost connections`}; nothing was shown twice.`
          : "↻ Rejoined the running turn; shown from its first event.",
      );
    }
    this.turnId = ev.turn_id;
    for (const b of this.blocks.values()) {
      for (const button of b.rating?.querySelectorAll("button") ?? []) button.disabled = false;
    }
    for (const agent of this.blocks.keys()) this.announceBlock(agent);
    const total = ev.usage.reduce((n, u) => n + u.input_tokens + u.output_tokens, 0);
    const costs = ev.usage.filter((u) => typeof u.cost_usd === "number");
    const perAgent = ev.usage.map((u) => {
      const cost = typeof u.cost_usd === "number" ? `, $${u.cost_usd.toFixed(4)}` : "";
      return `${agentLabel(u.agent)} ${u.input_tokens} in / ${u.output_tokens} out${cost}`;
    });
    const parts = [`Status: ${ev.status}`, seconds(ev.duration_ms), `${total} tokens`];
    if (costs.length) parts.push(`$${costs.reduce((n, u) => n + u.cost_usd, 0).toFixed(4)}`);
    this.footer = el(
      "footer",
      { class: `turn-footer status-${ev.status}`, "data-status": ev.status },
      el("p", { class: "summary" }, parts.join(" · ")),
      el("p", { class: "per-agent" }, perAgent.join("; ")),
    );
    this.reply.append(this.footer);
    const waiting = ev.interrupts?.length ?? 0;
    if (ev.status === "interrupted") announce(`Waiting for your approval of ${waiting} ${waiting === 1 ? "call" : "calls"}.`);
    else announce(`Reply ${ev.status === "ok" ? "complete" : ev.status}.`);
  }

  /**
   * Shows a stored turn (`messages`: its stored messages, in seq order, as
   * `GET chat/{episode}/messages` sends them): the user's message, each agent's answer with its
   * choices, rating and handoff note, and a footer with the turn's status.
   */
  restore(messages) {
    this.reset();
    const user = messages.find((m) => m.role === "user");
    this.userText.textContent = user ? user.content : "…";
    this.turnId = messages[0].turn_id;
    const replies = messages.filter((m) => m.role === "assistant");
    const rank = { ok: 0, interrupted: 1, partial: 2, cancelled: 3, error: 4 };
    let status = "ok";
    for (const m of replies) {
      if ((rank[m.status] ?? 0) > rank[status]) status = m.status;
      if (!m.content && !m.meta) continue; // an agent stopped by an approval before it said anything
      const b = this.block(m.agent);
      b.said += m.content;
      b.markdown.set(b.said);
      b.markdown.finish();
      b.announced = true; // restored text is not read out block by block
      const meta = m.meta ?? {};
      if (meta.choices) this.choices({ agent: m.agent, ...meta.choices });
      if (meta.feedback_ref) this.rating({ agent: m.agent, meta });
      if (meta.handoff) this.handoff({ agent: m.agent, ...meta.handoff });
    }
    for (const b of this.blocks.values()) {
      for (const button of b.rating?.querySelectorAll("button") ?? []) button.disabled = false;
    }
    if (!replies.length) {
      this.setStatus("No reply was recorded for this message (it may still be running).");
      return;
    }
    this.setStatus("");
    this.footer = el(
      "footer",
      { class: `turn-footer restored status-${status}`, "data-status": status },
      el("p", { class: "summary" }, `Status: ${status} · from the conversation's history`),
    );
    this.reply.append(this.footer);
  }

  /** The turn ended without `completed`: say why and offer a retry where it makes sense. */
  interrupted(text, retry) {
    this.setStatus("");
    const note = el("p", { class: "interrupted", role: "alert" }, el("strong", {}, "⚠ "), text);
    if (retry) {
      const button = el("button", { type: "button", class: "retry" }, "Try again");
      button.addEventListener("click", () => {
        note.remove();
        retry();
      });
      note.append(" ", button);
    }
    this.reply.append(note);
  }
}

/**
 * Streams a turn into `view`: `open({signal, onState})` is the client's `send`, `decide` or
 * `resume`; `retry` re-runs it when the stream broke for good. Resolves to what ended it early
 * (an error, shown in the view), or null when it streamed to its `completed`.
 */
async function follow(view, open, retry, rejoining = false) {
  view.reset();
  const controller = new AbortController();
  const turn = { controller, view, stopping: false, timer: null, timedOut: false };
  running = turn;
  sendButton.disabled = true;
  stopButton.disabled = false;
  if (rejoining) view.setStatus("Rejoining the running turn…");
  const onState = (state, info) => {
    if (state === "reconnecting") {
      view.replaying("reconnecting", `Connection lost; reconnecting (try ${info.attempt})…`);
      announce("Connection lost; reconnecting.");
    } else if (state === "replaying" && !rejoining) {
      view.reconnects += 1;
      view.replaying("replaying", "Replaying: rejoined the turn where it stopped…");
      announce("Reconnected; replaying.");
    } else if (state === "replaying") {
      view.replaying("replaying", "Replaying the running turn from its start…");
      rejoining = false; // a later break of this stream is a lost connection like any other
    }
  };
  let failure = null;
  try {
    for await (const ev of open({ signal: controller.signal, onState })) {
      view.render(ev);
      updateEpisode();
    }
  } catch (e) {
    failure = e;
    if (e?.name === "AbortError") {
      view.interrupted(turn.timedOut ? "Stopped here; the server did not confirm the stop." : "Stopped.", null);
      announce("Stopped.");
    } else if (e instanceof BatonHttpError) {
      view.error(null, e.code, e.message, e.status >= 500);
      view.setStatus("");
    } else if (e instanceof BatonStreamError) {
      view.replay?.remove();
      view.replay = null;
      view.interrupted(`Connection lost: ${e.message}.`, retry);
      announce("Connection lost.");
    } else {
      view.interrupted(`Unexpected error: ${e?.message ?? e}`, null);
    }
  } finally {
    view.settle();
    clearTimeout(turn.timer);
    if (running === turn) running = null;
    sendButton.disabled = false;
    stopButton.disabled = true;
    updateEpisode();
  }
  return failure;
}

/** A new turn; a retry sends the same request id, so the server records no second user message. */
function runTurn(view, message, requestId) {
  return follow(view, (options) => client.send(message, { ...options, requestId }), () => runTurn(view, message, requestId));
}

/** Rejoins a turn still running (after a reload) from its first event. */
function rejoin(view, turnId) {
  return follow(view, (options) => client.resume(turnId, options), () => rejoin(view, turnId), true);
}

/**
 * Stop: asks the server to cancel the turn (from any instance; not just a dropped connection) and
 * keeps reading until its `completed` (`cancelled`) arrives, which is bounded by STOP_GRACE_MS.
 */
function stop() {
  const turn = running;
  if (!turn || turn.stopping) return;
  turn.stopping = true;
  stopButton.disabled = true;
  turn.view.setStatus("Stopping…");
  announce("Stopping.");
  client.stop().then(
    () => {
      turn.timer = setTimeout(() => {
        if (running !== turn) return;
        turn.timedOut = true;
        turn.controller.abort();
      }, STOP_GRACE_MS);
    },
    (e) => {
      if (running !== turn) return;
      turn.stopping = false;
      stopButton.disabled = false;
      turn.view.setStatus("");
      turn.view.error(null, e?.code ?? "stop_failed", `The turn could not be stopped: ${e?.message ?? e}`, true);
    },
  );
}

// Cards of calls waiting for approval, by interrupt id.
const pendingCards = new Map();

/** Closes every waiting card with `text` (a new message answered them, or the conversation changed). */
function closeCards(text) {
  for (const card of pendingCards.values()) card.done("dismissed", text);
  pendingCards.clear();
}

/**
 * Sends a card's decision (the resume request) and streams the resumed turn as a new turn. The
 * card then says what happened: a refusal the person can fix (an edit the server rejects, a
 * server error) reopens it; one that is final (answered already, expired, unknown) closes it.
 */
async function decide(card, decision) {
  if (running) {
    card.reopen("A reply is still streaming: decide once it has finished.");
    return;
  }
  const approve = decision.decision === "approve";
  const said = approve
    ? `Approve ${card.interrupt.tool}${decision.arguments ? ` with ${JSON.stringify(decision.arguments)}` : ""}`
    : `Reject ${card.interrupt.tool}${decision.message ? `: ${decision.message}` : ""}`;
  card.busy(approve ? "Approving…" : "Rejecting…");
  pendingCards.delete(card.id);
  const view = new TurnView(said);
  view.root.scrollIntoView({ block: "end" });
  const requestId = newRequestId();
  const open = (options) => client.decide([decision], { ...options, requestId });
  const retry = () => follow(view, open, retry);
  const failure = await follow(view, open, retry);
  const refused = failure instanceof BatonHttpError;
  if (refused && (failure.status >= 500 || failure.code === "invalid_arguments" || failure.code === "invalid_resume")) {
    pendingCards.set(card.id, card);
    card.reopen(failure.message);
  } else if (refused) {
    card.done("refused", `Not sent: ${failure.message}`);
  } else {
    card.done(approve ? "approved" : "rejected", approve ? "Approved." : "Rejected.");
  }
}

/** Sends `message` as a new turn (the server answers any waiting approval as rejected). */
function send(message) {
  closeCards("Not answered: a new message was sent, so this call will not run.");
  const view = new TurnView(message);
  view.root.scrollIntoView({ block: "end" });
  runTurn(view, message, newRequestId());
}

form.addEventListener("submit", (e) => {
  e.preventDefault();
  const message = input.value.trim();
  if (!message || running) return;
  input.value = "";
  send(message);
});

// Enter sends, Shift+Enter starts a new line; Escape stops a running turn.
input.addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    form.requestSubmit();
  }
});
document.addEventListener("keydown", (e) => {
  if (e.key === "Escape" && running) stop();
});
stopButton.addEventListener("click", stop);
$("new-episode").addEventListener("click", () => {
  if (running) {
    // Leaving a running turn: stop it on the server too (the server lets it outlive the connection).
    client.stop().catch(() => {});
    running.controller.abort();
  }
  restoring?.abort();
  pendingCards.clear();
  client.newEpisode();
  transcript.replaceChildren();
  earlier.hidden = true;
  updateEpisode();
  input.focus();
});

// Restoring a conversation after a reload: stored turns by id, each with its messages by seq, so
// a turn split across two pages is shown once, whole, when the older page arrives.
const restored = new Map(); // turn id → { view, messages: Map<seq, message>, live? }
let restoring = null; // AbortController of a page being read
let olderPage = null; // the `before` of the next older page
const earlier = el("button", { type: "button", id: "earlier", class: "earlier", hidden: true }, "Show earlier messages");
transcript.before(earlier);

/** Shows a page of stored messages (oldest first): the newest page at the end, older ones on top. */
function showStored(messages) {
  const byTurn = new Map();
  for (const m of messages) {
    if (!byTurn.has(m.turn_id)) byTurn.set(m.turn_id, []);
    byTurn.get(m.turn_id).push(m);
  }
  // Anything shown already is newer: a later page, or a turn sent while this one loaded.
  const top = transcript.firstElementChild;
  for (const [turnId, stored] of byTurn) {
    let entry = restored.get(turnId);
    if (!entry) {
      entry = { view: new TurnView("", top), messages: new Map() };
      restored.set(turnId, entry);
    }
    for (const m of stored) entry.messages.set(m.seq, m);
    if (entry.live) continue; // being rejoined: its events, not its stored messages, are shown
    entry.view.restore([...entry.messages.values()].sort((a, b) => a.seq - b.seq));
  }
}

/** Reads one page of the conversation (the newest, or the one before the shown ones) and shows it. */
async function readStored(older) {
  restoring = new AbortController();
  earlier.disabled = true;
  try {
    const page = await client.messages({ before: older ? olderPage : undefined, signal: restoring.signal });
    showStored(page.messages);
    // What waits for approval belongs to the newest turn (one interrupted turn at a time).
    const newest = restored.get(page.messages.at(-1)?.turn_id);
    if (!older && newest) for (const interrupt of page.interrupts ?? []) newest.view.approval(interrupt);
    if (!older && page.running_turn && !running) {
      let entry = restored.get(page.running_turn);
      if (!entry) {
        entry = { view: new TurnView("…"), messages: new Map() };
        restored.set(page.running_turn, entry);
      }
      entry.live = true;
      rejoin(entry.view, page.running_turn);
    }
    olderPage = page.next ?? null;
    earlier.hidden = !olderPage;
    if (!older) transcript.lastElementChild?.scrollIntoView({ block: "end" });
    announce(older ? "Earlier messages shown." : "Conversation restored.");
  } catch (e) {
    if (e?.name === "AbortError") return;
    if (e instanceof BatonHttpError && e.status === 404) {
      // Expired, or not this user's: start afresh rather than keep a dead id.
      client.newEpisode();
      updateEpisode();
      return;
    }
    const note = el("p", { class: "interrupted", role: "alert" }, el("strong", {}, "⚠ "), `The conversation could not be loaded: ${e?.message ?? e}`);
    transcript.before(note);
  } finally {
    restoring = null;
    earlier.disabled = false;
  }
}
earlier.addEventListener("click", () => readStored(true));

client.episodeId = keptEpisode();
updateEpisode();
if (client.episodeId) readStored(false);
