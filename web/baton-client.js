// Baton's browser client: one chat turn as an async stream of events.
//
// The chat endpoint is a POST that answers with Server-Sent Events, so the browser's EventSource
// (GET only) cannot read it; this module reads the response body with fetch and parses the
// event stream itself. The parser follows the WHATWG "event stream interpretation" rules: lines
// end with CRLF, LF or CR (also when a CR and its LF arrive in different chunks), a leading BOM
// is dropped, `:` lines are comments (Baton's heartbeats), `data:` lines of one event are joined
// with "\n", an event is dispatched at a blank line, and an unfinished event at the end of the
// stream is discarded. It is ~60 lines with no dependency, tested byte boundary by byte boundary
// against Baton's own SSE fixtures (tests/browser/sse_parser.test.mjs), so the page needs no
// build step and no vendored copy of a library.
//
// See docs/web-client.md for the protocol and how to use this module in your own front end.

/** One parsed SSE message: the `event:` name, the joined `data:` lines and the last `id:`. */
export class SseMessage {
  constructor(event, data, id) {
    this.event = event;
    this.data = data;
    this.id = id;
  }
}

/** An incremental `text/event-stream` parser: feed it bytes or text as they arrive. */
export class SseParser {
  constructor() {
    this.decoder = new TextDecoder("utf-8");
    this.pending = ""; // text after the last line end
    this.skipLf = false; // the last chunk ended with CR: a leading LF belongs to it
    this.started = false; // the BOM check is done
    this.resetEvent();
    this.lastId = "";
  }

  resetEvent() {
    this.eventName = "";
    this.dataLines = null;
  }

  /**
   * Parses `chunk` (a Uint8Array of UTF-8, possibly split anywhere, or a string) and returns the
   * messages it completed, in order.
   */
  push(chunk) {
    let text = typeof chunk === "string" ? chunk : this.decoder.decode(chunk, { stream: true });
    if (!this.started && text.length > 0) {
      this.started = true;
      if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
    }
    if (this.skipLf && text.startsWith("\n")) text = text.slice(1);
    this.skipLf = false;
    const out = [];
    let buffer = this.pending + text;
    let start = 0;
    for (let i = 0; i < buffer.length; i++) {
      const c = buffer.charCodeAt(i);
      if (c !== 10 && c !== 13) continue;
      this.line(buffer.slice(start, i), out);
      if (c === 13) {
        if (i + 1 < buffer.length) {
          if (buffer.charCodeAt(i + 1) === 10) i++;
        } else {
          this.skipLf = true;
        }
      }
      start = i + 1;
    }
    this.pending = buffer.slice(start);
    return out;
  }

  /** Ends the stream: flushes the decoder; an event without its blank line is dropped. */
  end() {
    const rest = this.decoder.decode();
    const out = rest ? this.push(rest) : [];
    this.pending = "";
    this.resetEvent();
    return out;
  }

  line(line, out) {
    if (line === "") {
      if (this.dataLines !== null) {
        out.push(new SseMessage(this.eventName || "message", this.dataLines.join("\n"), this.lastId));
      }
      this.resetEvent();
      return;
    }
    if (line.startsWith(":")) return; // a comment: heartbeats
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") (this.dataLines ??= []).push(value);
    else if (field === "event") this.eventName = value;
    else if (field === "id" && !value.includes("\0")) this.lastId = value;
    // `retry` and unknown fields are ignored, as the standard says.
  }
}

/** The server refused the request before the stream started (a 4xx or 5xx JSON error). */
export class BatonHttpError extends Error {
  constructor(status, code, message) {
    super(message);
    this.name = "BatonHttpError";
    this.status = status;
    this.code = code;
  }
}

/**
 * The stream broke before `completed` (network loss, server gone). What arrived before stays
 * valid; retry with the same `requestId` to have the turn answered again without recording the
 * user message twice.
 */
export class BatonStreamError extends Error {
  constructor(message, cause) {
    super(message, { cause });
    this.name = "BatonStreamError";
  }
}

/** Parses one SSE message into a Baton event (the JSON object, with its `id` as `seq`). */
export function decodeEvent(message) {
  const event = JSON.parse(message.data);
  if (typeof event !== "object" || event === null || typeof event.type !== "string") {
    throw new BatonStreamError(`not a Baton event: ${message.data.slice(0, 80)}`);
  }
  if (message.event !== "message" && message.event !== event.type) {
    throw new BatonStreamError(`SSE event name ${message.event} does not match type ${event.type}`);
  }
  const seq = Number.parseInt(message.id, 10);
  return Object.assign(event, { seq: Number.isNaN(seq) ? null : seq });
}

/** A new client request id (for idempotent retries). */
export function newRequestId() {
  if (globalThis.crypto?.randomUUID) return globalThis.crypto.randomUUID();
  return `r-${Date.now().toString(36)}-${Math.random().toString(36).slice(2)}`;
}

/**
 * A client of one Baton chat endpoint. It keeps the episode id the server returns, so each
 * `send` continues the same conversation until `newEpisode()`.
 */
export class BatonClient {
  /**
   * @param {object} options
   * @param {string} [options.endpoint] URL of the chat endpoint (default `chat`, relative to the page).
   * @param {string} [options.user] the `x-baton-user` header (only the unauthenticated local mode reads it).
   * @param {string|(() => string|Promise<string>)} [options.token] a bearer token (JWT mode), or a function returning one.
   * @param {string} [options.episodeId] continue this episode.
   * @param {typeof fetch} [options.fetch] the fetch to use.
   */
  constructor({ endpoint = "chat", user, token, episodeId, fetch: fetchImpl } = {}) {
    this.endpoint = endpoint;
    this.user = user;
    this.token = token;
    this.episodeId = episodeId ?? null;
    this.fetch = fetchImpl ?? globalThis.fetch.bind(globalThis);
  }

  /**
   * Rates an answer of the current episode: `POST {endpoint}/{episode}/csat` with
   * `{turn_id, rating}` (`rating` is "up" or "down"). Resolves to the server's JSON; throws
   * BatonHttpError when refused (404 `no_rateable_answer` for a turn without a rateable answer).
   *
   * @param {string|null} turnId the rated turn (null: the latest rateable answer)
   * @param {"up"|"down"} rating
   */
  async rate(turnId, rating) {
    if (!this.episodeId) throw new BatonHttpError(400, "no_episode", "there is no conversation to rate yet");
    const headers = { "content-type": "application/json" };
    if (this.user) headers["x-baton-user"] = this.user;
    const token = typeof this.token === "function" ? await this.token() : this.token;
    if (token) headers.authorization = `Bearer ${token}`;
    const body = { rating };
    if (turnId) body.turn_id = turnId;
    const url = `${this.endpoint.replace(/\/+$/, "")}/${encodeURIComponent(this.episodeId)}/csat`;
    const response = await this.fetch(url, { method: "POST", headers, body: JSON.stringify(body) });
    if (!response.ok) throw await httpError(response);
    return response.json();
  }

  /**
   * One page of the current episode's recorded conversation: `GET {endpoint}/{episode}/messages`.
   * Resolves to `{episode_id, messages, next?}`: up to `limit` messages (default 50, at most 200),
   * oldest first, each `{turn_id, seq, role, agent, content, status, created_at, usage?, meta?}`;
   * the first page is the newest, and `next`, when present, is the `before` of the page before
   * it. Throws BatonHttpError when refused (404 `episode_not_found` for an episode this user
   * does not have, 400 for a bad `limit` or `before`).
   *
   * @param {{limit?: number, before?: string, signal?: AbortSignal}} [options]
   */
  async messages({ limit, before, signal } = {}) {
    if (!this.episodeId) throw new BatonHttpError(400, "no_episode", "there is no conversation to read yet");
    const headers = { accept: "application/json" };
    if (this.user) headers["x-baton-user"] = this.user;
    const token = typeof this.token === "function" ? await this.token() : this.token;
    if (token) headers.authorization = `Bearer ${token}`;
    const query = new URLSearchParams();
    if (limit != null) query.set("limit", String(limit));
    if (before != null) query.set("before", before);
    const qs = query.toString();
    const base = `${this.endpoint.replace(/\/+$/, "")}/${encodeURIComponent(this.episodeId)}/messages`;
    const response = await this.fetch(qs ? `${base}?${qs}` : base, { headers, signal });
    if (!response.ok) throw await httpError(response);
    return response.json();
  }

  /** Forgets the episode: the next message starts a new conversation. */
  newEpisode() {
    this.episodeId = null;
  }

  /**
   * Sends `message` and yields the turn's events as they arrive, ending after `completed`.
   * Aborting `signal` cancels the request (the server keeps what was produced, as `partial`).
   * Throws BatonHttpError when refused, BatonStreamError when the stream breaks, and the
   * fetch's AbortError when aborted.
   *
   * @param {string} message
   * @param {{signal?: AbortSignal, requestId?: string, image?: object}} [options]
   */
  async *send(message, { signal, requestId, image } = {}) {
    const headers = { "content-type": "application/json", accept: "text/event-stream" };
    if (this.user) headers["x-baton-user"] = this.user;
    const token = typeof this.token === "function" ? await this.token() : this.token;
    if (token) headers.authorization = `Bearer ${token}`;
    const body = { message };
    if (this.episodeId) body.episode_id = this.episodeId;
    if (requestId) body.request_id = requestId;
    if (image) body.image = image;

    let response;
    try {
      response = await this.fetch(this.endpoint, { method: "POST", headers, body: JSON.stringify(body), signal });
    } catch (e) {
      if (e?.name === "AbortError") throw e;
      throw new BatonStreamError(`could not reach ${this.endpoint}: ${e?.message ?? e}`, e);
    }
    if (!response.ok) throw await httpError(response);
    const episode = response.headers.get("x-baton-episode-id");
    if (episode) this.episodeId = episode;

    const parser = new SseParser();
    const reader = response.body.getReader();
    let lastSeq = -1;
    let completed = false;
    try {
      for (;;) {
        let chunk;
        try {
          chunk = await reader.read();
        } catch (e) {
          if (e?.name === "AbortError" || signal?.aborted) throw e;
          throw new BatonStreamError(`the connection was lost: ${e?.message ?? e}`, e);
        }
        const messages = chunk.done ? parser.end() : parser.push(chunk.value);
        for (const m of messages) {
          const event = decodeEvent(m);
          // Sequence numbers count up from 0 within a turn: anything not newer was seen already.
          if (event.seq !== null) {
            if (event.seq <= lastSeq) continue;
            lastSeq = event.seq;
          }
          if (event.type === "completed") {
            completed = true;
            if (event.episode_id) this.episodeId = event.episode_id;
          }
          yield event;
          if (completed) return;
        }
        if (chunk.done) break;
      }
    } finally {
      if (!completed) reader.cancel().catch(() => {});
    }
    throw new BatonStreamError("the stream ended before the turn completed");
  }
}

async function httpError(response) {
  let code = `http_${response.status}`;
  let message = `${response.status} ${response.statusText}`.trim();
  try {
    const json = await response.json();
    if (json?.error) {
      code = json.error.code ?? code;
      message = json.error.message ?? message;
    }
  } catch {
    // Not a Baton JSON error (a proxy's page): keep the status line.
  }
  return new BatonHttpError(response.status, code, message);
}
