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
// build step and no SSE library.
//
// See docs/web-client.md for the protocol and how to use this module in your own front end.

/**
 * One parsed SSE message: the `event:` name, the joined `data:` lines, the last `id:` (the stream's
 * "last event ID", which carries over from earlier messages as the standard says) and `ownId`,
 * whether this message had an `id:` line of its own.
 */
export class SseMessage {
  constructor(event, data, id, ownId = Boolean(id)) {
    this.event = event;
    this.data = data;
    this.id = id;
    this.ownId = ownId;
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
    this.comments = 0; // `:` lines seen (heartbeats): a sign of life without an event
  }

  resetEvent() {
    this.eventName = "";
    this.dataLines = null;
    this.ownId = false;
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
        out.push(new SseMessage(this.eventName || "message", this.dataLines.join("\n"), this.lastId, this.ownId));
      }
      this.resetEvent();
      return;
    }
    if (line.startsWith(":")) {
      this.comments++; // a comment: heartbeats
      return;
    }
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") (this.dataLines ??= []).push(value);
    else if (field === "event") this.eventName = value;
    else if (field === "id" && !value.includes("\0")) {
      this.lastId = value;
      this.ownId = true;
    }
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

/**
 * Splits an SSE id into its turn and its sequence number. Baton writes `<turn_id>:<seq>`, `seq` a
 * decimal integer counting up from 1 within the turn; a bare `<seq>` (servers before resumable
 * turns) has no turn. `seq` is a Number, so `t:10` comes after `t:9` (never compare ids as
 * strings); it is null when the id carries no decimal number.
 *
 * @param {string} id
 * @returns {{turnId: string|null, seq: number|null}}
 */
export function parseEventId(id) {
  if (typeof id !== "string" || id === "") return { turnId: null, seq: null };
  const colon = id.lastIndexOf(":");
  const digits = id.slice(colon + 1);
  const seq = /^\d{1,15}$/.test(digits) ? Number(digits) : null;
  return { turnId: colon > 0 ? id.slice(0, colon) : null, seq };
}

/**
 * Parses one SSE message into a Baton event: the JSON object, plus `seq` (the number of its
 * `id:`, null without one) and `eventId` (its `id:` as sent, null when the message had none of its
 * own: the synthesized `completed` of an abandoned turn has none).
 */
export function decodeEvent(message) {
  const event = JSON.parse(message.data);
  if (typeof event !== "object" || event === null || typeof event.type !== "string") {
    throw new BatonStreamError(`not a Baton event: ${message.data.slice(0, 80)}`);
  }
  if (message.event !== "message" && message.event !== event.type) {
    throw new BatonStreamError(`SSE event name ${message.event} does not match type ${event.type}`);
  }
  const own = message.ownId !== false && Boolean(message.id);
  const { seq } = own ? parseEventId(message.id) : { seq: null };
  return Object.assign(event, { seq, eventId: own ? message.id : null });
}

/** A new client request id (for idempotent retries). */
export function newRequestId() {
  if (globalThis.crypto?.randomUUID) return globalThis.crypto.randomUUID();
  return `r-${Date.now().toString(36)}-${Math.random().toString(36).slice(2)}`;
}

/** How the client reconnects a broken stream (see `BatonClient`'s `reconnect` option). */
export const RECONNECT_DEFAULTS = Object.freeze({ tries: 4, delayMs: 250, maxDelayMs: 4000, jitter: 0.2 });

/**
 * A client of one Baton chat endpoint. It keeps the episode id the server returns, so each
 * `send` continues the same conversation until `newEpisode()`; and the turn it streams
 * (`turnId`, `lastEventId`), so a broken stream is rejoined where it stopped and `stop()` can
 * cancel the turn on the server.
 */
export class BatonClient {
  /**
   * @param {object} options
   * @param {string} [options.endpoint] URL of the chat endpoint (default `chat`, relative to the page).
   * @param {string} [options.user] the `x-baton-user` header (only the unauthenticated local mode reads it).
   * @param {string|(() => string|Promise<string>)} [options.token] a bearer token (JWT mode), or a function returning one.
   * @param {string} [options.episodeId] continue this episode.
   * @param {"continue"|"cancel"} [options.onDisconnect] sent as `on_disconnect` with each turn (default: not sent, the server's default applies).
   * @param {{tries?: number, delayMs?: number, maxDelayMs?: number, jitter?: number}} [options.reconnect]
   *   reconnects of a broken stream: at most `tries` in a row without a new event, the n-th after
   *   `min(delayMs * 2^(n-1), maxDelayMs)` less up to `jitter` of it (at random). `tries: 0` never reconnects.
   * @param {typeof fetch} [options.fetch] the fetch to use.
   */
  constructor({ endpoint = "chat", user, token, episodeId, onDisconnect, reconnect, fetch: fetchImpl } = {}) {
    this.endpoint = endpoint;
    this.user = user;
    this.token = token;
    this.episodeId = episodeId ?? null;
    this.onDisconnect = onDisconnect;
    this.reconnect = { ...RECONNECT_DEFAULTS, ...reconnect };
    this.fetch = fetchImpl ?? globalThis.fetch.bind(globalThis);
    /** The turn of the last `send` or `resume` (null until the server named it). */
    this.turnId = null;
    /** The SSE id of the last event delivered of that turn (`<turn_id>:<seq>`), the resume point. */
    this.lastEventId = null;
    this.pendingStop = null; // a stop() asked before the turn was known
  }

  /** The credentials every request carries, with `extra` headers. */
  async headers(extra) {
    const headers = { ...extra };
    if (this.user) headers["x-baton-user"] = this.user;
    const token = typeof this.token === "function" ? await this.token() : this.token;
    if (token) headers.authorization = `Bearer ${token}`;
    return headers;
  }

  /** `{endpoint}/{episode}/{path}`, each id escaped. */
  url(episodeId, ...path) {
    const parts = [episodeId, ...path].map(encodeURIComponent);
    return `${this.endpoint.replace(/\/+$/, "")}/${parts.join("/")}`;
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
    const headers = await this.headers({ "content-type": "application/json" });
    const body = { rating };
    if (turnId) body.turn_id = turnId;
    const response = await this.fetch(this.url(this.episodeId, "csat"), { method: "POST", headers, body: JSON.stringify(body) });
    if (!response.ok) throw await httpError(response);
    return response.json();
  }

  /**
   * One page of the current episode's recorded conversation: `GET {endpoint}/{episode}/messages`.
   * Resolves to `{episode_id, messages, next?, running_turn?}`: up to `limit` messages (default
   * 50, at most 200), oldest first, each `{turn_id, seq, role, agent, content, status, created_at,
   * usage?, meta?}`; the first page is the newest, and `next`, when present, is the `before` of
   * the page before it. The first page also names the episode's turn still running
   * (`running_turn`), whose reply is not in the messages yet: rejoin it with `resume()`. Throws
   * BatonHttpError when refused (404 `episode_not_found` for an episode this user does not have,
   * 400 for a bad `limit` or `before`).
   *
   * @param {{limit?: number, before?: string, signal?: AbortSignal}} [options]
   */
  async messages({ limit, before, signal } = {}) {
    if (!this.episodeId) throw new BatonHttpError(400, "no_episode", "there is no conversation to read yet");
    const headers = await this.headers({ accept: "application/json" });
    const query = new URLSearchParams();
    if (limit != null) query.set("limit", String(limit));
    if (before != null) query.set("before", before);
    const qs = query.toString();
    const base = this.url(this.episodeId, "messages");
    const response = await this.fetch(qs ? `${base}?${qs}` : base, { headers, signal });
    if (!response.ok) throw await httpError(response);
    return response.json();
  }

  /** Forgets the episode: the next message starts a new conversation. */
  newEpisode() {
    this.episodeId = null;
    this.turnId = null;
    this.lastEventId = null;
  }

  /**
   * Asks the server to stop a turn: `POST {endpoint}/{episode}/turns/{turn}/cancel`. Resolves to
   * the server's JSON (202 `{episode_id, turn_id, cancel: "requested"}`, or `cancel: "done"` once
   * it has ended `cancelled`: asking twice is fine);
   * the turn's stream then ends with `completed` status `cancelled`. Throws BatonHttpError when
   * refused: 409 `turn_ended` when the turn had ended, 404 when it is not this caller's.
   *
   * @param {string} [turnId] default: the turn of the last `send` or `resume`
   * @param {{episodeId?: string}} [options]
   */
  async cancel(turnId = this.turnId, { episodeId = this.episodeId } = {}) {
    if (!episodeId || !turnId) throw new BatonHttpError(400, "no_turn", "there is no turn to stop");
    const headers = await this.headers({ accept: "application/json" });
    const response = await this.fetch(this.url(episodeId, "turns", turnId, "cancel"), { method: "POST", headers });
    if (!response.ok) throw await httpError(response);
    return response.json();
  }

  /**
   * Stops the turn being streamed (the Stop button): `cancel()` of the current turn, at once, or
   * as soon as the server names the turn when it has not yet. Keep reading the stream: it ends
   * with `completed` status `cancelled`, and the server keeps the partial reply. Resolves to the
   * server's JSON, or to null when the turn had already ended (409). Unlike aborting the fetch,
   * this stops the turn even when the server lets turns outlive their connection.
   */
  stop() {
    if (this.turnId && this.episodeId) return this.cancel().catch(endedIsNull);
    if (!this.pendingStop) {
      let settle;
      const promise = new Promise((resolve, reject) => (settle = { resolve, reject }));
      this.pendingStop = { promise, ...settle };
    }
    return this.pendingStop.promise;
  }

  /** Sends a stop asked before the turn was known, now that it is (or fails it: `error`). */
  settleStop(error) {
    const pending = this.pendingStop;
    if (!pending) return;
    this.pendingStop = null;
    if (error) pending.reject(error);
    else this.cancel().catch(endedIsNull).then(pending.resolve, pending.reject);
  }

  /**
   * Sends `message` and yields the turn's events as they arrive, ending after `completed`. When
   * the stream breaks (a network error, or the body ends without `completed`), it rejoins the turn
   * by itself (`GET {endpoint}/{episode}/turns/{turn}/events` with `Last-Event-ID`), within the
   * `reconnect` bounds, and goes on yielding where it stopped: no event is yielded twice.
   * `onState(state, info)` says what the stream is doing: `"streaming"`, `"reconnecting"` (the
   * stream broke; the next try is in `info.delayMs`), `"replaying"` (a resume stream is open: the
   * events after `info.lastEventId`, then the live rest of the turn).
   *
   * Aborting `signal` drops the connection and ends the generator with the fetch's AbortError
   * (whether the turn goes on is the server's `on_disconnect`; use `stop()` to stop it).
   * Throws BatonHttpError when refused, BatonStreamError when the stream broke and could not be
   * rejoined.
   *
   * @param {string} message
   * @param {{signal?: AbortSignal, requestId?: string, image?: object, onDisconnect?: "continue"|"cancel",
   *   onState?: (state: string, info: object) => void}} [options]
   */
  async *send(message, { signal, requestId, image, onDisconnect = this.onDisconnect, onState } = {}) {
    const body = { message };
    if (this.episodeId) body.episode_id = this.episodeId;
    if (image) body.image = image;
    yield* this.postTurn(body, { signal, requestId, onDisconnect, onState });
  }

  /**
   * Answers tool calls waiting for a person's approval (`approval_required`; a turn that ended
   * `interrupted` lists them in `completed.interrupts`, and `messages()` in `interrupts`) and
   * yields the resumed turn's events, as `send` does (a new turn: `thinking` … `completed`).
   * Each decision is `{interrupt_id, decision: "approve"|"reject", message?, arguments?}`:
   * `message` (a rejection only) is what the person said, which the agent's model reads;
   * `arguments` (an approval only) replaces the fields the interrupt lists as `editable`.
   * Interrupts left out stay pending (the turn may end `interrupted` again, listing them).
   * Throws BatonHttpError when refused before the stream starts: 400 `invalid_resume` or
   * `invalid_arguments` (the message names the field), 404 `interrupt_not_found`, 410
   * `interrupt_expired`, 409 `interrupt_answered`, `resume_in_progress` or `config_changed`.
   *
   * @param {{interrupt_id: string, decision: "approve"|"reject", message?: string, arguments?: object}[]} decisions
   * @param {{signal?: AbortSignal, requestId?: string, onDisconnect?: "continue"|"cancel",
   *   onState?: (state: string, info: object) => void}} [options]
   */
  async *decide(decisions, { signal, requestId, onDisconnect = this.onDisconnect, onState } = {}) {
    if (!this.episodeId) throw new BatonHttpError(400, "no_episode", "there is no conversation with approvals to answer");
    if (!Array.isArray(decisions) || decisions.length === 0) {
      throw new BatonHttpError(400, "invalid_resume", "decide() needs at least one decision");
    }
    yield* this.postTurn({ episode_id: this.episodeId, resume: decisions }, { signal, requestId, onDisconnect, onState });
  }

  /** POSTs a turn request (`send`, `decide`) and follows its stream. */
  async *postTurn(body, { signal, requestId, onDisconnect, onState }) {
    const headers = await this.headers({ "content-type": "application/json", accept: "text/event-stream" });
    if (requestId) body.request_id = requestId;
    if (onDisconnect) body.on_disconnect = onDisconnect;
    this.turnId = null;
    this.lastEventId = null;
    const post = () => this.fetch(this.endpoint, { method: "POST", headers, body: JSON.stringify(body), signal });
    yield* this.follow(post, { signal, onState });
  }

  /**
   * Rejoins a turn of the current episode (`GET {endpoint}/{episode}/turns/{turn}/events`): its
   * events after `lastEventId` (all of them without one), then the live rest until `completed`,
   * reconnecting as `send` does. After a reload, `messages()` names the turn still running.
   *
   * @param {string} turnId
   * @param {{lastEventId?: string, signal?: AbortSignal, onState?: (state: string, info: object) => void}} [options]
   */
  async *resume(turnId, { lastEventId, signal, onState } = {}) {
    if (!this.episodeId) throw new BatonHttpError(400, "no_episode", "there is no conversation to rejoin");
    this.turnId = turnId;
    this.lastEventId = lastEventId ?? null;
    yield* this.follow(null, { signal, onState });
  }

  /**
   * The events of the current turn: from `post()`'s response (a new turn), or from a resume
   * request when `post` is null; each break is rejoined from `lastEventId`.
   */
  async *follow(post, { signal, onState }) {
    let lastSeq = parseEventId(this.lastEventId ?? "").seq ?? -1;
    let resuming = post === null;
    let misses = 0; // reconnects in a row that brought no new event
    let lost = "the stream ended before the turn completed";
    try {
      for (;;) {
        let response = null;
        try {
          if (resuming) {
            const extra = { accept: "text/event-stream" };
            if (this.lastEventId) extra["last-event-id"] = this.lastEventId;
            response = await this.fetch(this.url(this.episodeId, "turns", this.turnId, "events"), {
              headers: await this.headers(extra),
              signal,
            });
          } else {
            response = await post();
          }
        } catch (e) {
          if (e?.name === "AbortError" || signal?.aborted) throw e;
          if (!resuming) throw new BatonStreamError(`could not reach ${this.endpoint}: ${e?.message ?? e}`, e);
          lost = `the connection was lost: ${e?.message ?? e}`;
        }
        let progressed = false;
        if (response && !response.ok) {
          // A refusal is final (a bad id, a turn not this caller's); a 5xx or a busy server is retried.
          if (!resuming || ![408, 429, 500, 502, 503, 504].includes(response.status)) throw await httpError(response);
          lost = `the server answered ${response.status}`;
          response.body?.cancel().catch(() => {});
        } else if (response) {
          if (!resuming) {
            const episode = response.headers.get("x-baton-episode-id");
            if (episode) this.episodeId = episode;
            this.turnId = response.headers.get("x-baton-turn-id") ?? this.turnId;
          }
          onState?.(resuming ? "replaying" : "streaming", { turnId: this.turnId, lastEventId: this.lastEventId });
          const parser = new SseParser();
          const reader = response.body.getReader();
          let completed = false;
          try {
            for (;;) {
              if (this.turnId && this.pendingStop) this.settleStop();
              let chunk;
              try {
                chunk = await reader.read();
              } catch (e) {
                if (e?.name === "AbortError" || signal?.aborted) throw e;
                lost = `the connection was lost: ${e?.message ?? e}`;
                break;
              }
              for (const m of chunk.done ? parser.end() : parser.push(chunk.value)) {
                const event = decodeEvent(m);
                if (event.eventId !== null) {
                  const id = parseEventId(event.eventId);
                  if (id.turnId && this.turnId && id.turnId !== this.turnId) {
                    throw new BatonStreamError(`event ${event.eventId} is not of turn ${this.turnId}`);
                  }
                  this.turnId ??= id.turnId;
                  // Anything not newer was delivered already (a replay overlapping what arrived).
                  if (id.seq !== null) {
                    if (id.seq <= lastSeq) continue;
                    lastSeq = id.seq;
                  }
                  this.lastEventId = event.eventId;
                }
                if (event.type === "thinking" && event.turn_id) this.turnId ??= event.turn_id;
                if (event.type === "completed") {
                  completed = true;
                  if (event.episode_id) this.episodeId = event.episode_id;
                }
                progressed = true;
                yield event;
                if (completed) return;
              }
              if (chunk.done) {
                lost = "the stream ended before the turn completed";
                break;
              }
            }
          } finally {
            if (!completed) reader.cancel().catch(() => {});
          }
        }
        // The stream broke before `completed`: rejoin the turn, if the server named it.
        if (!this.turnId || !this.episodeId) throw new BatonStreamError(lost);
        misses = progressed ? 1 : misses + 1;
        const { tries, delayMs, maxDelayMs, jitter } = this.reconnect;
        if (misses > tries) {
          throw new BatonStreamError(`${lost} (${tries} ${tries === 1 ? "reconnect" : "reconnects"} failed)`);
        }
        const full = Math.min(delayMs * 2 ** (misses - 1), maxDelayMs);
        const wait = Math.round(full * (1 - jitter * Math.random()));
        onState?.("reconnecting", { attempt: misses, delayMs: wait, lastEventId: this.lastEventId, reason: lost });
        await sleep(wait, signal);
        resuming = true;
      }
    } finally {
      this.settleStop(new BatonStreamError("the turn ended before it could be stopped"));
    }
  }
}

/** A stop of a turn that had ended anyway (409 `turn_ended`) is no failure: null. */
function endedIsNull(e) {
  if (e instanceof BatonHttpError && e.status === 409) return null;
  throw e;
}

/** Waits `ms`, or rejects with the abort reason when `signal` aborts first. */
function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    const aborted = () => signal.reason ?? new DOMException("aborted", "AbortError");
    if (signal?.aborted) return reject(aborted());
    const onAbort = () => {
      clearTimeout(timer);
      reject(aborted());
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
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
