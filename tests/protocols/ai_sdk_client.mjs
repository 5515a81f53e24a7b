// Sends `useChat` requests to Baton's `POST /ai-sdk` through the `ai` package's own transport
// (`DefaultChatTransport`, what `useChat` uses) and reads the answer with `readUIMessageStream`,
// which validates every part against the package's schema; prints, as one JSON line, the parts
// received and the final UI message of each request.
//
// usage: node ai_sdk_client.mjs <base-url> '<plan JSON>'
// plan: {"chatId", "requests": [{"message"?, "reconnect"?: true, "abortAfter"?: "<part type>",
//        "trigger"?, "messages"?: [..] (sent as they are)}], "user"?, "headers"?}
import { DefaultChatTransport, readUIMessageStream } from "ai";

const [base, planJson] = process.argv.slice(2);
const plan = JSON.parse(planJson);
const headers = { ...(plan.headers ?? {}), ...(plan.user ? { "x-baton-user": plan.user } : {}) };
const transport = new DefaultChatTransport({ api: `${base}/ai-sdk`, headers });

let messages = [];
const requests = [];
for (const [i, request] of plan.requests.entries()) {
  const seen = { parts: [], message: null, error: null, aborted: false, empty: false };
  const controller = new AbortController();
  try {
    let stream;
    if (request.reconnect) {
      stream = await transport.reconnectToStream({ chatId: plan.chatId, abortSignal: controller.signal });
      if (stream === null) seen.empty = true;
    } else {
      if (request.messages) {
        messages = request.messages;
      } else {
        messages = [...messages, { id: `m${i}${Date.now()}`, role: "user", parts: [{ type: "text", text: request.message }] }];
      }
      stream = await transport.sendMessages({
        chatId: plan.chatId,
        messages,
        abortSignal: controller.signal,
        trigger: request.trigger ?? "submit-message",
        messageId: undefined,
      });
    }
    if (stream) {
      const [forParts, forMessage] = stream.tee();
      const collect = (async () => {
        const reader = forParts.getReader();
        for (;;) {
          const { done, value } = await reader.read();
          if (done) break;
          seen.parts.push(value);
          if (request.abortAfter && value.type === request.abortAfter && !seen.aborted) {
            seen.aborted = true;
            controller.abort();
          }
        }
      })().catch((e) => { if (!seen.aborted) seen.error ??= { message: String(e?.message ?? e) }; });
      for await (const message of readUIMessageStream({ stream: forMessage, onError: (e) => { seen.streamError = String(e?.message ?? e); } })) {
        seen.message = message;
      }
      await collect;
      if (seen.message) messages = [...messages, seen.message];
    }
  } catch (e) {
    if (!seen.aborted) seen.error = { message: String(e?.message ?? e), status: e?.statusCode ?? e?.status, body: e?.responseBody };
  }
  requests.push(seen);
}
process.stdout.write(JSON.stringify({ requests }) + "\n");
