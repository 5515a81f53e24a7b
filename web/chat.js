// The chat page: renders each turn's events as they stream (see docs/web-client.md).
//
// One turn is one <li> of the transcript: the user's message, the orchestrator's preamble, one
// block per answering agent (created at its first text, so blocks appear in the order agents
// speak), an activity list (agents and tools starting and finishing), in-band errors, and a
// footer from `completed`. A retry after a lost connection re-renders the same turn from scratch,
// so nothing is shown twice.

import { BatonClient, BatonHttpError, BatonStreamError, newRequestId } from "./baton-client.js";

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

let running = null; // { controller } while a turn streams

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k.startsWith("data-") || k.startsWith("aria-") || k === "role") node.setAttribute(k, v);
    else node[k] = v;
  }
  node.append(...children);
  return node;
}

function announce(text) {
  // A fresh text node each time so screen readers speak repeated messages too.
  announcer.textContent = "";
  announcer.append(document.createTextNode(text));
}

function seconds(ms) {
  return ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(2)} s`;
}

function agentLabel(agent) {
  if (agent === "orchestrator") return "Orchestrator";
  const name = agent.split("[")[0];
  const label = name.charAt(0).toUpperCase() + name.slice(1);
  const index = agent.match(/\[(\d+)\]/)?.[1];
  return index && index !== "1" ? `${label} (${index})` : label;
}

function updateEpisode() {
  episodeLabel.textContent = client.episodeId ? `Conversation ${client.episodeId}` : "New conversation";
}

/** The rendering of one turn; `reset()` empties it for a retry. */
class TurnView {
  constructor(message) {
    this.root = el("li", { class: "turn" });
    this.root.append(
      el("div", { class: "msg user" }, el("span", { class: "who" }, "You"), el("p", { class: "text" }, message)),
    );
    this.reply = el("div", { class: "reply" });
    this.root.append(this.reply);
    transcript.append(this.root);
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
    this.footer = null;
    this.reply.append(this.status, this.answers, this.errors, this.activity);
    this.activity.hidden = true;
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
    b = { section, text, said: "", announced: false };
    this.blocks.set(agent, b);
    return b;
  }

  progress(line, kind) {
    this.activity.hidden = false;
    this.activityList.append(el("li", { class: `progress ${kind}` }, line));
  }

  /** Reads the block's finished text out to screen readers, once. */
  announceBlock(agent) {
    const b = this.blocks.get(agent);
    if (b && !b.announced && b.said.trim()) {
      b.announced = true;
      announce(`${agentLabel(agent)}: ${b.said}`);
    }
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
        b.text.textContent = b.said;
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
        const mark = ev.status === "ok" ? "✓" : "✗";
        this.progress(
          `${mark} ${agentLabel(ev.agent)} finished (${ev.status}) in ${seconds(ev.duration_ms)}, ${tokens} tokens`,
          `finished ${ev.status}`,
        );
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

  complete(ev) {
    this.setStatus("");
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
    announce(`Reply ${ev.status === "ok" ? "complete" : ev.status}.`);
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

async function runTurn(view, message, requestId) {
  view.reset();
  const controller = new AbortController();
  running = { controller };
  sendButton.disabled = true;
  stopButton.disabled = false;
  try {
    for await (const ev of client.send(message, { signal: controller.signal, requestId })) {
      view.render(ev);
      updateEpisode();
    }
  } catch (e) {
    if (e?.name === "AbortError") {
      view.interrupted("Stopped. The reply so far is kept.", null);
      announce("Stopped.");
    } else if (e instanceof BatonHttpError) {
      view.error(null, e.code, e.message, e.status >= 500);
      view.setStatus("");
    } else if (e instanceof BatonStreamError) {
      // Retrying with the same request id answers the turn again without a second user message;
      // the view is cleared first, so no text appears twice.
      view.interrupted(`Connection lost: ${e.message}.`, () => runTurn(view, message, requestId));
      announce("Connection lost.");
    } else {
      view.interrupted(`Unexpected error: ${e?.message ?? e}`, null);
    }
  } finally {
    running = null;
    sendButton.disabled = false;
    stopButton.disabled = true;
    updateEpisode();
  }
}

form.addEventListener("submit", (e) => {
  e.preventDefault();
  const message = input.value.trim();
  if (!message || running) return;
  input.value = "";
  const view = new TurnView(message);
  view.root.scrollIntoView({ block: "end" });
  runTurn(view, message, newRequestId());
});

// Enter sends, Shift+Enter starts a new line; Escape stops a running turn.
input.addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    form.requestSubmit();
  }
});
document.addEventListener("keydown", (e) => {
  if (e.key === "Escape" && running) running.controller.abort();
});
stopButton.addEventListener("click", () => running?.controller.abort());
$("new-episode").addEventListener("click", () => {
  if (running) running.controller.abort();
  client.newEpisode();
  transcript.replaceChildren();
  updateEpisode();
  input.focus();
});
updateEpisode();
