// Runs AG-UI runs against Baton's `POST /agui` with the official client (`@ag-ui/client`'s
// HttpAgent, whose event verifier rejects out-of-order or malformed sequences) and prints, as
// one JSON line, what the client saw: every event, the agent's messages, the run's outcome.
//
// usage: node agui_client.mjs <base-url> '<plan JSON>'
// plan: {"threadId", "runs": [{"message"?, "runId"?, "resume"?, "abortAfter"?: "<EVENT_TYPE>",
//        "tools"?, "extraMessages"?: [..]}], "user"?: "<x-baton-user>", "headers"?: {..}}
import { HttpAgent } from "@ag-ui/client";

const [base, planJson] = process.argv.slice(2);
const plan = JSON.parse(planJson);
const headers = { ...(plan.headers ?? {}), ...(plan.user ? { "x-baton-user": plan.user } : {}) };
const agent = new HttpAgent({ url: `${base}/agui`, headers, threadId: plan.threadId });

const runs = [];
for (const [i, run] of plan.runs.entries()) {
  for (const m of run.extraMessages ?? []) agent.messages.push(m);
  if (run.message !== undefined) {
    agent.messages.push({ id: `u${i}-${Date.now()}`, role: "user", content: run.message });
  }
  const seen = { events: [], outcome: null, interrupts: [], error: null, aborted: false };
  const controller = new AbortController();
  const subscriber = {
    onEvent({ event }) {
      seen.events.push(event);
      if (run.abortAfter && event.type === run.abortAfter && !seen.aborted) {
        seen.aborted = true;
        controller.abort();
      }
    },
    onRunFinishedEvent(params) {
      seen.outcome = params.outcome;
      if (params.outcome === "interrupt") seen.interrupts = params.interrupts;
    },
    onRunErrorEvent({ event }) {
      seen.outcome = "error";
      seen.runError = { code: event.code, message: event.message };
    },
  };
  const parameters = { abortController: controller };
  if (run.runId) parameters.runId = run.runId;
  if (run.resume) parameters.resume = run.resume;
  if (run.tools) parameters.tools = run.tools;
  try {
    await agent.runAgent(parameters, subscriber);
  } catch (e) {
    seen.error = { name: e?.name ?? "Error", message: String(e?.message ?? e), status: e?.status, payload: e?.payload };
  }
  seen.messages = agent.messages.map((m) => ({ ...m }));
  runs.push(seen);
}
process.stdout.write(JSON.stringify({ runs }) + "\n");
