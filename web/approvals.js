// Approval cards: a tool call that waits for a person (`approval_required`, docs/approvals.md),
// shown with what it would do and Approve / Reject.
//
// A card shows the tool, the agent that called it (and the path of agents above it), the reason
// the configuration gives, the arguments as formatted JSON, when the wait expires, an optional note
// sent with a rejection, and, when the interrupt lists `editable` fields, a JSON field to change
// those before approving. A click hands the decision (`{interrupt_id, decision, message?,
// arguments?}`, as the resume request takes it) to the page, which sends it and streams the
// resumed turn; the card then says what became of it. Nothing here talks to the server.

import { el } from "./dom.js";

/**
 * The fields a person changed in the edit field of an interrupt (`text`: a JSON object of some of
 * its `editable` fields), or null when they changed nothing. Throws an Error whose message says
 * what is wrong (not JSON, not an object, a field that may not be changed). A pure function.
 *
 * @param {{arguments: object, editable?: string[]}} interrupt
 * @param {string} text
 * @returns {object|null}
 */
export function editedArguments(interrupt, text) {
  if (!text.trim()) return null;
  let edited;
  try {
    edited = JSON.parse(text);
  } catch (e) {
    throw new Error(`The changes are not valid JSON: ${e.message}`);
  }
  if (typeof edited !== "object" || edited === null || Array.isArray(edited)) {
    throw new Error("The changes must be a JSON object of the fields to change.");
  }
  const editable = interrupt.editable ?? [];
  const foreign = Object.keys(edited).filter((k) => !editable.includes(k));
  if (foreign.length) {
    const allowed = editable.length ? `only ${editable.join(", ")} may be changed` : "no field may be changed";
    throw new Error(`${foreign.join(", ")} cannot be changed: ${allowed}.`);
  }
  const changed = Object.entries(edited).filter(([k, v]) => JSON.stringify(v) !== JSON.stringify(interrupt.arguments?.[k]));
  return changed.length ? Object.fromEntries(changed) : null;
}

let cards = 0; // ids for labels

/** One waiting tool call, with its controls. `root` is the element to place. */
export class ApprovalCard {
  /**
   * @param {object} interrupt the `approval_required` event (or an entry of `interrupts`)
   * @param {{label: (agent: string) => string, onDecide: (card: ApprovalCard, decision: object) => void}} options
   */
  constructor(interrupt, { label, onDecide }) {
    this.interrupt = interrupt;
    const id = `approval-${++cards}`;
    const path = (interrupt.path ?? []).map(label).join(" → ");
    const expires = new Date(interrupt.expires_at * 1000);
    this.error = el("p", { class: "approval-error", role: "alert", hidden: true });
    this.state = el("p", { class: "approval-state", role: "status" });
    this.note = el("input", { id: `${id}-note`, class: "approval-note", type: "text", autocomplete: "off" });
    this.approveButton = el("button", { type: "button", class: "approve" }, "Approve");
    this.rejectButton = el("button", { type: "button", class: "reject" }, "Reject");
    this.controls = el("div", { class: "approval-controls" });
    const editable = interrupt.editable ?? [];
    if (editable.length) {
      const current = Object.fromEntries(editable.map((k) => [k, interrupt.arguments?.[k] ?? null]));
      this.edit = el("textarea", { id: `${id}-edit`, class: "approval-edit", rows: editable.length + 2, spellcheck: false });
      this.edit.value = JSON.stringify(current, null, 2);
      this.controls.append(
        el("label", { for: this.edit.id }, `Change before approving (JSON; may change: ${editable.join(", ")})`),
        this.edit,
      );
    }
    this.controls.append(
      el("label", { for: this.note.id }, "Note for the assistant if you reject (optional)"),
      this.note,
      this.error,
      el("div", { class: "approval-actions" }, this.approveButton, this.rejectButton),
    );
    this.root = el(
      "section",
      { class: "approval", role: "group", "aria-labelledby": `${id}-title`, "data-interrupt": interrupt.interrupt_id, "data-state": "pending" },
      el("h3", { id: `${id}-title` }, "Approval needed: ", el("code", {}, interrupt.tool)),
      el("p", { class: "approval-who" }, `Asked by ${label(interrupt.agent)}${path ? ` (${path})` : ""}`),
      el("p", { class: "approval-reason" }, interrupt.reason),
      el("p", { class: "approval-args-label" }, "Arguments"),
      el("pre", { class: "approval-args" }, JSON.stringify(interrupt.arguments ?? {}, null, 2)),
      el("p", { class: "approval-expiry" }, `Waits until ${expires.toLocaleString()}.`),
      this.controls,
      this.state,
    );
    this.approveButton.addEventListener("click", () => this.decide("approve", onDecide));
    this.rejectButton.addEventListener("click", () => this.decide("reject", onDecide));
  }

  get id() {
    return this.interrupt.interrupt_id;
  }

  decide(kind, onDecide) {
    const decision = { interrupt_id: this.id, decision: kind };
    if (kind === "approve" && this.edit) {
      try {
        const edited = editedArguments(this.interrupt, this.edit.value);
        if (edited) decision.arguments = edited;
      } catch (e) {
        this.reopen(e.message);
        this.edit.focus();
        return;
      }
    }
    const note = this.note.value.trim();
    if (kind === "reject" && note) decision.message = note;
    onDecide(this, decision);
  }

  /** The decision is on its way: the controls wait. */
  busy(text) {
    this.error.hidden = true;
    for (const c of this.controls.querySelectorAll("button, input, textarea")) c.disabled = true;
    this.root.dataset.state = "sending";
    this.state.textContent = text;
  }

  /** The decision could not be sent, or was refused in a way the person can fix: try again. */
  reopen(message) {
    for (const c of this.controls.querySelectorAll("button, input, textarea")) c.disabled = false;
    this.root.dataset.state = "pending";
    this.state.textContent = "";
    this.error.hidden = false;
    this.error.textContent = `⚠ ${message}`;
  }

  /** Nothing more to decide here (`state`: approved, rejected, dismissed, refused): the controls go. */
  done(state, text) {
    this.controls.remove();
    this.root.dataset.state = state;
    this.state.textContent = text;
  }
}
