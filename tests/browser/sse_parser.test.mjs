// The browser client's SSE parsing (web/baton-client.js) over Baton's exact-bytes fixtures.
// Run: node --test tests/browser/
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";

import {
  BatonClient,
  BatonHttpError,
  BatonStreamError,
  SseParser,
} from "../../web/baton-client.js";

const fixture = (name) => readFileSync(new URL(`./fixtures/${name}`, import.meta.url));
const FIXTURES = ["mixed-turn.sse", "heartbeat-turn.sse", "error-turn.sse"];
const utf8 = new TextEncoder();

/** What a fixture holds, read independently of the parser: its blocks between blank lines. */
function expected(bytes) {
  const out = [];
  for (const block of new TextDecoder().decode(bytes).split("\n\n")) {
    const lines = block.split("\n").filter((l) => l && !l.startsWith(":"));
    if (!lines.length) continue;
    const field = (name) => lines.find((l) => l.startsWith(`${name}: `)).slice(name.length + 2);
    out.push({ event: field("event"), id: field("id"), data: field("data") });
  }
  return out;
}

function parseChunks(chunks) {
  const parser = new SseParser();
  const out = [];
  for (const c of chunks) out.push(...parser.push(c));
  out.push(...parser.end());
  return out.map(({ event, id, data }) => ({ event, id, data }));
}

function withLineEnds(bytes, end) {
  return utf8.encode(new TextDecoder().decode(bytes).replaceAll("\n", end));
}

test("each fixture parses into its events, heartbeats skipped", () => {
  for (const name of FIXTURES) {
    const bytes = fixture(name);
    const want = expected(bytes);
    assert.ok(want.length >= 3, name);
    assert.deepEqual(parseChunks([bytes]), want, name);
  }
  const mixed = parseChunks([fixture("mixed-turn.sse")]);
  assert.equal(mixed.at(-1).event, "completed");
  assert.equal(JSON.parse(mixed.at(-1).data).status, "ok");
});

test("a split at every byte boundary gives the same events (LF, CRLF and CR line ends)", () => {
  for (const name of FIXTURES) {
    for (const end of ["\n", "\r\n", "\r"]) {
      const bytes = withLineEnds(fixture(name), end);
      const want = expected(fixture(name));
      for (let i = 0; i <= bytes.length; i++) {
        const got = parseChunks([bytes.subarray(0, i), bytes.subarray(i)]);
        assert.deepEqual(got, want, `${name} ${JSON.stringify(end)} split at ${i}`);
      }
    }
  }
});

test("one byte at a time keeps multi-byte characters whole", () => {
  const bytes = fixture("heartbeat-turn.sse");
  const chunks = Array.from(bytes, (_, i) => bytes.subarray(i, i + 1));
  const got = parseChunks(chunks);
  assert.deepEqual(got, expected(bytes));
  const text = got.filter((m) => m.event === "text").map((m) => JSON.parse(m.data).text).join("");
  assert.equal(text, "Hello! Ça va? 😀 How can I help?");
});

test("data split over several data: lines is joined with newlines", () => {
  for (const name of FIXTURES) {
    const text = new TextDecoder().decode(fixture(name));
    // Split between JSON members (before `"key":`), where a newline is JSON whitespace.
    const member = /,(?="[a-z_]+":)/g;
    const multi = text.replace(/^data: (.*)$/gm, (_, json) => `data: ${json.replace(member, ",\ndata: ")}`);
    assert.notEqual(multi, text);
    const bytes = utf8.encode(multi);
    const want = expected(fixture(name));
    for (const i of [0, 1, 7, 100, bytes.length >> 1, bytes.length - 1]) {
      const got = parseChunks([bytes.subarray(0, i), bytes.subarray(i)]);
      assert.equal(got.length, want.length, name);
      got.forEach((m, k) => {
        assert.equal(m.data, want[k].data.replace(member, ",\n"));
        assert.deepEqual(JSON.parse(m.data), JSON.parse(want[k].data));
      });
    }
  }
});

test("comments, a BOM, fields without a value and an unfinished last event", () => {
  const got = parseChunks([
    "\uFEFF: heartbeat\n\n:no space\nevent: text\nid: 4\ndata\ndata: x\nretry: 10\nunknown: y\n\n",
    "data: {\"type\":\"thinking\"}\n\n",
    "event: text\ndata: never finished",
  ]);
  assert.deepEqual(got, [
    { event: "text", id: "4", data: "\nx" },
    { event: "message", id: "4", data: "{\"type\":\"thinking\"}" },
  ]);
  assert.deepEqual(parseChunks([": only a heartbeat\n\n", "\n\n"]), [], "no data, no event");
});

function bodyOf(bytes, cut = bytes.length) {
  let i = 0;
  return new ReadableStream({
    pull(controller) {
      if (i >= cut) {
        if (cut < bytes.length) controller.error(new TypeError("network error"));
        else controller.close();
        return;
      }
      const n = Math.min(7, cut - i);
      controller.enqueue(bytes.slice(i, i + n));
      i += n;
    },
  });
}

function fakeFetch(response, seen = []) {
  return async (url, init) => {
    seen.push({ url, init });
    return typeof response === "function" ? response() : response;
  };
}

test("the client yields a turn's events, keeps the episode and sends it next time", async () => {
  const bytes = fixture("mixed-turn.sse");
  const seen = [];
  const response = () =>
    new Response(bodyOf(bytes), {
      headers: { "content-type": "text/event-stream", "x-baton-episode-id": "ep-fixture" },
    });
  const client = new BatonClient({ endpoint: "http://x/chat", user: "alice", fetch: fakeFetch(response, seen) });
  const events = [];
  for await (const ev of client.send("hi", { requestId: "r1" })) events.push(ev);
  assert.equal(events.length, expected(bytes).length);
  assert.deepEqual(events.map((e) => e.seq), events.map((_, i) => i + 1), "seqs from 1, as the server numbers them");
  assert.equal(events.at(-1).type, "completed");
  assert.equal(client.episodeId, "ep-fixture");
  assert.equal(seen[0].init.headers["x-baton-user"], "alice");
  assert.deepEqual(JSON.parse(seen[0].init.body), { message: "hi", request_id: "r1" });
  for await (const _ of client.send("again")) void _;
  assert.equal(JSON.parse(seen[1].init.body).episode_id, "ep-fixture");
});

test("a repeated event id is not yielded twice", async () => {
  const bytes = fixture("error-turn.sse");
  const text = new TextDecoder().decode(bytes);
  const blocks = text.split("\n\n");
  const doubled = utf8.encode([blocks[0], blocks[1], blocks[1], ...blocks.slice(2)].join("\n\n"));
  const client = new BatonClient({ fetch: fakeFetch(new Response(bodyOf(doubled))) });
  const types = [];
  for await (const ev of client.send("hi")) types.push(ev.type);
  assert.deepEqual(types, ["thinking", "error", "completed"]);
});

test("a lost connection is a BatonStreamError after the events that arrived", async () => {
  const bytes = fixture("mixed-turn.sse");
  const client = new BatonClient({ fetch: fakeFetch(new Response(bodyOf(bytes, 900))) });
  const got = [];
  await assert.rejects(async () => {
    for await (const ev of client.send("hi")) got.push(ev);
  }, BatonStreamError);
  assert.ok(got.length > 2 && got.every((e) => e.type !== "completed"));

  const ended = new BatonClient({ fetch: fakeFetch(new Response(bodyOf(bytes.subarray(0, 900)))) });
  await assert.rejects(async () => {
    for await (const _ of ended.send("hi")) void _;
  }, /ended before the turn completed/);
});

test("a refused request is a BatonHttpError with the server's code", async () => {
  const refused = new Response(JSON.stringify({ error: { code: "message_too_long", message: "too long" } }), {
    status: 413,
    headers: { "content-type": "application/json" },
  });
  const client = new BatonClient({ fetch: fakeFetch(refused) });
  await assert.rejects(
    async () => {
      for await (const _ of client.send("x")) void _;
    },
    (e) => e instanceof BatonHttpError && e.status === 413 && e.code === "message_too_long",
  );
});

test("messages() reads a page of the episode with its user, limit and cursor", async () => {
  const seen = [];
  const page = { episode_id: "e 1", messages: [{ turn_id: "t", seq: 0, role: "user", content: "hi" }], next: "t.0" };
  const ok = () => new Response(JSON.stringify(page), { headers: { "content-type": "application/json" } });
  const client = new BatonClient({ endpoint: "http://x/chat/", user: "alice", token: "tok", episodeId: "e 1", fetch: fakeFetch(ok, seen) });
  assert.deepEqual(await client.messages(), page);
  assert.equal(seen[0].url, "http://x/chat/e%201/messages");
  assert.equal(seen[0].init.method, undefined, "a GET");
  assert.equal(seen[0].init.headers["x-baton-user"], "alice");
  assert.equal(seen[0].init.headers.authorization, "Bearer tok");
  await client.messages({ limit: 20, before: "t.0" });
  assert.equal(seen[1].url, "http://x/chat/e%201/messages?limit=20&before=t.0");
  await assert.rejects(() => new BatonClient({ fetch: fakeFetch(ok) }).messages(), (e) => e.code === "no_episode");
});

test("messages() of an episode the server does not know is a 404 BatonHttpError", async () => {
  const gone = new Response(JSON.stringify({ error: { code: "episode_not_found", message: "no" } }), {
    status: 404,
    headers: { "content-type": "application/json" },
  });
  const client = new BatonClient({ episodeId: "e", fetch: fakeFetch(gone) });
  await assert.rejects(() => client.messages(), (e) => e instanceof BatonHttpError && e.status === 404 && e.code === "episode_not_found");
});
