// The browser client's resumable turns (web/baton-client.js) against a real HTTP server on
// loopback that breaks its streams on purpose: event ids compared as numbers, no event twice,
// the reconnect request and its Last-Event-ID, bounded reconnects, stop through the cancel
// endpoint. Run: node --test tests/browser/
import { test } from "node:test";
import assert from "node:assert/strict";

import { BatonClient, BatonHttpError, BatonStreamError, parseEventId } from "../../web/baton-client.js";
import { withServer } from "./loopback.mjs";

const TURN = "0193f1c2-turn";
const EP = "ep-1";

/** One SSE block as Baton writes it; `id: false` leaves the id line out. */
function frame(seq, event, id = `${TURN}:${seq}`) {
  return `event: ${event.type}\n${id === false ? "" : `id: ${id}\n`}data: ${JSON.stringify(event)}\n\n`;
}

const thinking = { type: "thinking", episode_id: EP, turn_id: TURN };
const text = (t) => ({ type: "text", agent: "orchestrator", text: t });
const completed = (status = "ok") => ({
  type: "completed", episode_id: EP, turn_id: TURN, status, model: "m", duration_ms: 5, usage: [],
});
/** The turn the tests stream: thinking, eleven words, completed (seq 1 to 13). */
const WORDS = Array.from({ length: 11 }, (_, i) => `w${i + 1} `);
const TURN_EVENTS = [thinking, ...WORDS.map(text), completed()];
const frames = (from, to) => TURN_EVENTS.slice(from - 1, to).map((ev, i) => frame(from + i, ev)).join("");

function sseHead(res, extra = {}) {
  res.writeHead(200, { "content-type": "text/event-stream", "x-baton-episode-id": EP, "x-baton-turn-id": TURN, ...extra });
}

/** Sends `body`, then breaks the connection (a network error for the reader). */
function sendAndCut(res, body) {
  res.write(body, () => setTimeout(() => res.socket?.destroy(), 20));
}

async function collect(stream) {
  const events = [];
  for await (const ev of stream) events.push(ev);
  return events;
}

const fast = { tries: 3, delayMs: 1, maxDelayMs: 4, jitter: 0 };

test("ids split into turn and numeric seq: t:10 comes after t:9", () => {
  assert.deepEqual(parseEventId(`${TURN}:10`), { turnId: TURN, seq: 10 });
  assert.ok(parseEventId("t:10").seq > parseEventId("t:9").seq);
  assert.ok("t:10" < "t:9", "as strings the order would be wrong");
  assert.deepEqual(parseEventId("7"), { turnId: null, seq: 7 });
  assert.deepEqual(parseEventId("a:b:12"), { turnId: "a:b", seq: 12 });
  for (const bad of ["", "t:", "t:x", "t:-1", "t:1.5", "t: 3"]) assert.equal(parseEventId(bad).seq, null, bad);
});

test("a cut mid-turn is rejoined with Last-Event-ID; the overlap is dropped, t:10 after t:9 kept", async () => {
  await withServer(
    (req, res, _, n) => {
      if (n === 1) {
        sseHead(res);
        sendAndCut(res, frames(1, 9)); // up to t:9, then the network goes
      } else {
        sseHead(res);
        res.end(frames(7, 13)); // a replay that overlaps what arrived: t:7, t:8, t:9 again
      }
    },
    async (endpoint, requests) => {
      const states = [];
      const client = new BatonClient({ endpoint, user: "alice", reconnect: fast });
      const events = await collect(
        client.send("hi", { onState: (s, info) => states.push([s, info.lastEventId ?? null]) }),
      );
      assert.deepEqual(events.map((e) => e.seq), Array.from({ length: 13 }, (_, i) => i + 1), "each once, in order");
      assert.equal(events.filter((e) => e.type === "text").map((e) => e.text).join(""), WORDS.join(""));
      assert.equal(events.at(-1).type, "completed");
      assert.equal(requests.length, 2);
      const resume = requests[1];
      assert.equal(resume.method, "GET");
      assert.equal(resume.url, `/chat/${EP}/turns/${TURN}/events`);
      assert.equal(resume.headers["last-event-id"], `${TURN}:9`);
      assert.equal(resume.headers["x-baton-user"], "alice");
      assert.equal(resume.headers.accept, "text/event-stream");
      assert.deepEqual(states, [
        ["streaming", null],
        ["reconnecting", `${TURN}:9`],
        ["replaying", `${TURN}:9`],
      ]);
      assert.equal(client.lastEventId, `${TURN}:13`);
      assert.equal(client.turnId, TURN);
    },
  );
});

test("a body that ends without completed is rejoined too, and the turn comes from the first event", async () => {
  await withServer(
    (req, res, _, n) => {
      // No x-baton-turn-id header: the client learns the turn from `thinking` and the ids.
      res.writeHead(200, { "content-type": "text/event-stream", "x-baton-episode-id": EP });
      res.end(n === 1 ? frames(1, 4) : frames(5, 13));
    },
    async (endpoint, requests) => {
      const client = new BatonClient({ endpoint, reconnect: fast });
      const events = await collect(client.send("hi"));
      assert.equal(events.length, 13);
      assert.equal(requests[1].headers["last-event-id"], `${TURN}:4`);
    },
  );
});

test("reconnects are bounded: after `tries` in a row without a new event, a BatonStreamError", async () => {
  await withServer(
    (req, res, _, n) => {
      if (n === 1) {
        sseHead(res);
        sendAndCut(res, frames(1, 3));
      } else if (n === 2) {
        res.socket.destroy(); // refused mid-request
      } else {
        res.writeHead(503, { "content-type": "application/json" });
        res.end(JSON.stringify({ error: { code: "unavailable", message: "busy" } }));
      }
    },
    async (endpoint, requests) => {
      const attempts = [];
      const client = new BatonClient({ endpoint, reconnect: fast });
      const got = [];
      await assert.rejects(
        async () => {
          for await (const ev of client.send("hi", { onState: (s, i) => s === "reconnecting" && attempts.push(i.attempt) })) got.push(ev);
        },
        (e) => e instanceof BatonStreamError && /3 reconnects failed/.test(e.message) && /503/.test(e.message),
      );
      assert.equal(got.length, 3, "the events that arrived stay delivered");
      assert.equal(requests.length, 4, "the POST and exactly three reconnects");
      assert.deepEqual(attempts, [1, 2, 3]);
      for (const r of requests.slice(1)) assert.equal(r.headers["last-event-id"], `${TURN}:3`);
    },
  );
});

test("the bound counts reconnects without progress: a turn cut after every event still completes", async () => {
  await withServer(
    (req, res, _, n) => {
      sseHead(res);
      // Every stream brings the next two events (and one already seen), then breaks.
      const from = Math.max(1, 2 * n - 2);
      if (from + 1 >= 13) res.end(frames(from, 13));
      else sendAndCut(res, frames(from, from + 1));
    },
    async (endpoint, requests) => {
      const client = new BatonClient({ endpoint, reconnect: { ...fast, tries: 1 } });
      const events = await collect(client.send("hi"));
      assert.deepEqual(events.map((e) => e.seq), Array.from({ length: 13 }, (_, i) => i + 1));
      assert.ok(requests.length >= 6, requests.length);
      assert.equal(new Set(requests.slice(1).map((r) => r.headers["last-event-id"])).size, requests.length - 1,
        "each reconnect from a newer id");
    },
  );
});

test("a refused reconnect (404, 400) is a BatonHttpError at once, not retried", async () => {
  for (const [status, code] of [[404, "not_found"], [400, "invalid_last_event_id"]]) {
    await withServer(
      (req, res, _, n) => {
        if (n === 1) {
          sseHead(res);
          sendAndCut(res, frames(1, 2));
        } else {
          res.writeHead(status, { "content-type": "application/json" });
          res.end(JSON.stringify({ error: { code, message: "no" } }));
        }
      },
      async (endpoint, requests) => {
        const client = new BatonClient({ endpoint, reconnect: fast });
        await assert.rejects(collect(client.send("hi")), (e) => e instanceof BatonHttpError && e.status === status && e.code === code);
        assert.equal(requests.length, 2);
      },
    );
  }
});

test("a failed POST is not retried (the turn is unknown): a BatonStreamError as before", async () => {
  await withServer(
    (req, res) => res.socket.destroy(),
    async (endpoint, requests) => {
      const client = new BatonClient({ endpoint, reconnect: fast });
      await assert.rejects(collect(client.send("hi")), (e) => e instanceof BatonStreamError && /could not reach/.test(e.message));
      assert.equal(requests.length, 1);
    },
  );
});

test("resume() rejoins a turn from the start or after an id; an abandoned turn's completed has no id", async () => {
  await withServer(
    (req, res) => {
      sseHead(res);
      const after = req.headers["last-event-id"] ? parseEventId(req.headers["last-event-id"]).seq : 0;
      res.end(frames(after + 1, 5) + frame(null, completed("abandoned"), false));
    },
    async (endpoint, requests) => {
      const client = new BatonClient({ endpoint, episodeId: EP });
      const all = await collect(client.resume(TURN));
      assert.equal(requests[0].url, `/chat/${EP}/turns/${TURN}/events`);
      assert.equal(requests[0].headers["last-event-id"], undefined, "from the start: no id");
      assert.deepEqual(all.map((e) => e.seq), [1, 2, 3, 4, 5, null]);
      assert.equal(all.at(-1).status, "abandoned", "delivered although the last id was 5");
      const rest = await collect(client.resume(TURN, { lastEventId: `${TURN}:3` }));
      assert.equal(requests[1].headers["last-event-id"], `${TURN}:3`);
      assert.deepEqual(rest.map((e) => e.seq), [4, 5, null]);
    },
  );
});

test("aborting while waiting to reconnect ends with an AbortError and no further request", async () => {
  await withServer(
    (req, res) => {
      sseHead(res);
      sendAndCut(res, frames(1, 2));
    },
    async (endpoint, requests) => {
      const controller = new AbortController();
      const client = new BatonClient({ endpoint, reconnect: { tries: 3, delayMs: 5000, jitter: 0 } });
      const started = Date.now();
      await assert.rejects(
        collect(client.send("hi", { signal: controller.signal, onState: (s) => s === "reconnecting" && controller.abort() })),
        (e) => e.name === "AbortError",
      );
      assert.ok(Date.now() - started < 3000, "the wait was cut short");
      assert.equal(requests.length, 1);
    },
  );
});

test("stop() posts the cancel endpoint and the stream ends with completed cancelled", async () => {
  let stream = null;
  await withServer(
    (req, res, _, n) => {
      if (req.method === "POST" && req.url === "/chat") {
        // Headers only after a while: stop() is asked before the turn is known.
        setTimeout(() => {
          sseHead(res);
          res.write(frames(1, 3));
          stream = res;
        }, 100);
      } else if (req.url.endsWith("/cancel")) {
        res.writeHead(202, { "content-type": "application/json" });
        res.end(JSON.stringify({ episode_id: EP, turn_id: TURN, cancel: "requested" }));
        stream.end(frame(4, completed("cancelled")));
      } else {
        res.writeHead(500).end();
      }
    },
    async (endpoint, requests) => {
      const client = new BatonClient({ endpoint, user: "alice", onDisconnect: "continue" });
      const turn = collect(client.send("hi"));
      await new Promise((r) => setTimeout(r, 20));
      const stopped = client.stop();
      const [events, answer] = await Promise.all([turn, stopped]);
      assert.deepEqual(answer, { episode_id: EP, turn_id: TURN, cancel: "requested" });
      assert.equal(events.at(-1).status, "cancelled");
      assert.deepEqual(JSON.parse(requests[0].body), { message: "hi", on_disconnect: "continue" });
      const cancel = requests.find((r) => r.url.endsWith("/cancel"));
      assert.equal(cancel.method, "POST");
      assert.equal(cancel.url, `/chat/${EP}/turns/${TURN}/cancel`);
      assert.equal(cancel.headers["x-baton-user"], "alice");
      assert.equal(requests.length, 2, "the stream was read to its end, not dropped and rejoined");
    },
  );
});

test("cancel() of an ended turn is a 409 BatonHttpError; stop() takes it as null", async () => {
  await withServer(
    (req, res) => {
      res.writeHead(409, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: { code: "turn_ended", message: "the turn ended (ok)" } }));
    },
    async (endpoint, requests) => {
      const client = new BatonClient({ endpoint, episodeId: EP });
      await assert.rejects(client.cancel(TURN), (e) => e instanceof BatonHttpError && e.status === 409 && e.code === "turn_ended");
      client.turnId = TURN;
      assert.equal(await client.stop(), null);
      assert.equal(requests.length, 2);
      await assert.rejects(new BatonClient({ endpoint }).cancel(), (e) => e.code === "no_turn");
    },
  );
});
