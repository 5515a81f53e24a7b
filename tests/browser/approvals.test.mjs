// Answering approvals from JS: `BatonClient.decide` (the resume request) against a real HTTP
// server on loopback, and the approval card's reading of an edit (web/approvals.js). The page
// itself is tested in Chromium (tests/browser/test_approvals.py). Run: node --test tests/browser/
import { test } from "node:test";
import assert from "node:assert/strict";

import { BatonClient, BatonHttpError } from "../../web/baton-client.js";
import { editedArguments } from "../../web/approvals.js";
import { withServer } from "./loopback.mjs";

const EP = "ep-1";
const TURN = "turn-2";
const events = [
  { type: "thinking", episode_id: EP, turn_id: TURN },
  { type: "tool_call_start", agent: "card_keeper[1]", call_id: "c0", name: "clip_offer", arguments: { offer: "o-13" } },
  { type: "completed", episode_id: EP, turn_id: TURN, status: "ok", model: "m", duration_ms: 5, usage: [] },
];
const sse = events.map((e, i) => `event: ${e.type}\nid: ${TURN}:${i + 1}\ndata: ${JSON.stringify(e)}\n\n`).join("");

const streamTurn = (_req, res) => {
  res.writeHead(200, { "content-type": "text/event-stream", "x-baton-episode-id": EP, "x-baton-turn-id": TURN });
  res.end(sse);
};

test("decide posts the resume request and yields the resumed turn", async () => {
  await withServer(streamTurn, async (endpoint, requests) => {
    const client = new BatonClient({ endpoint, user: "alice", episodeId: EP, onDisconnect: "continue" });
    const decisions = [
      { interrupt_id: "int_1", decision: "approve", arguments: { offer: "o-13" } },
      { interrupt_id: "int_2", decision: "reject", message: "Not that one." },
    ];
    const seen = [];
    for await (const ev of client.decide(decisions, { requestId: "r-1" })) seen.push(ev.type);
    assert.deepEqual(seen, ["thinking", "tool_call_start", "completed"]);
    assert.equal(requests.length, 1);
    const [req] = requests;
    assert.equal(req.method, "POST");
    assert.equal(req.url, "/chat");
    assert.equal(req.headers["x-baton-user"], "alice");
    assert.equal(req.headers["content-type"], "application/json");
    assert.deepEqual(JSON.parse(req.body), { episode_id: EP, resume: decisions, request_id: "r-1", on_disconnect: "continue" });
    assert.equal(client.turnId, TURN);
  });
});

test("a refused resume is a BatonHttpError with the server's code", async () => {
  const refuse = (_req, res) => {
    res.writeHead(409, { "content-type": "application/json" });
    res.end(JSON.stringify({ error: { code: "interrupt_answered", message: "interrupt `int_1` was answered already (approve)" } }));
  };
  await withServer(refuse, async (endpoint) => {
    const client = new BatonClient({ endpoint, episodeId: EP });
    await assert.rejects(
      async () => {
        for await (const _ of client.decide([{ interrupt_id: "int_1", decision: "approve" }]));
      },
      (e) => e instanceof BatonHttpError && e.status === 409 && e.code === "interrupt_answered" && /answered already/.test(e.message),
    );
  });
});

test("decide needs a conversation and at least one decision, and asks nothing otherwise", async () => {
  await withServer(streamTurn, async (endpoint, requests) => {
    const drain = async (it) => {
      for await (const _ of it);
    };
    await assert.rejects(drain(new BatonClient({ endpoint }).decide([{ interrupt_id: "i", decision: "approve" }])), { code: "no_episode" });
    await assert.rejects(drain(new BatonClient({ endpoint, episodeId: EP }).decide([])), { code: "invalid_resume" });
    assert.equal(requests.length, 0);
  });
});

test("an edit gives only the editable fields that changed", () => {
  const interrupt = { arguments: { offer: "o-12", note: "x" }, editable: ["offer"] };
  assert.equal(editedArguments(interrupt, '{"offer": "o-12"}'), null, "unchanged: approve as asked");
  assert.equal(editedArguments(interrupt, "  "), null);
  assert.deepEqual(editedArguments(interrupt, '{"offer": "o-13"}'), { offer: "o-13" });
  assert.throws(() => editedArguments(interrupt, '{"offer": "o-13", "note": "y"}'), /^Error: note cannot be changed: only offer may be changed\.$/);
  assert.throws(() => editedArguments(interrupt, "[1]"), /must be a JSON object/);
  assert.throws(() => editedArguments(interrupt, "{offer: 1}"), /not valid JSON/);
  assert.throws(() => editedArguments({ arguments: {} }, '{"a": 1}'), /no field may be changed/);
});
