"""A small A2A v1.0 agent built on the official Python SDK (PyPI `a2a-sdk`), the remote agent
behind Baton's A2A client in the tests and in examples/a2a_team.yaml.

    .venv/bin/python tests/a2a/sample_agent.py --port 41241

serves its card at http://127.0.0.1:41241/.well-known/agent-card.json and JSON-RPC at /a2a.
What it does depends on the message:
- contains "slow": 40 chunks, 0.25 s apart (a task to cancel, or to outlast a timeout);
- contains "fail": the task fails with a message;
- contains "which": it asks a question (TASK_STATE_INPUT_REQUIRED);
- contains "count": how many messages its context has had ("Message 2 in this conversation.");
- otherwise: a short forecast in three artifact chunks, then TASK_STATE_COMPLETED, with token
  usage in the final status update's metadata.
With --token T, a request without `Authorization: Bearer T` gets HTTP 401.
With --sigv4 SERVICE:REGION, every request (the card's too) must be SigV4-signed for that scope
with the key pair in A2A_SAMPLE_KEY_ID and A2A_SAMPLE_SECRET (environment variables, never
printed): the signature is recomputed with botocore's SigV4Auth over the request as received;
anything else gets HTTP 403 saying why.
"""

import argparse
import asyncio
import datetime
import hmac
import os
import re

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

import uvicorn
from starlette.applications import Starlette
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.responses import JSONResponse

from a2a.server.agent_execution.agent_executor import AgentExecutor
from a2a.server.agent_execution.context import RequestContext
from a2a.server.events.event_queue import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks.inmemory_task_store import InMemoryTaskStore
from a2a.server.tasks.task_updater import TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Part,
    Task,
    TaskState,
    TaskStatus,
)


class WeatherExecutor(AgentExecutor):
    def __init__(self) -> None:
        self.cancelled: set[str] = set()
        self.messages: dict[str, int] = {}

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        self.cancelled.add(context.task_id or "")
        await TaskUpdater(event_queue, context.task_id or "", context.context_id or "").cancel()

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id = context.task_id or "", context.context_id or ""
        await event_queue.enqueue_event(
            Task(id=task_id, context_id=context_id, status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED))
        )
        updater = TaskUpdater(event_queue, task_id, context_id)
        await updater.start_work()
        query = context.get_user_input()
        words = query.lower()
        self.messages[context_id] = self.messages.get(context_id, 0) + 1
        if "fail" in words:
            await updater.failed(updater.new_agent_message(parts=[Part(text="the forecast service is down")]))
            return
        if "which" in words:
            await updater.requires_input(updater.new_agent_message(parts=[Part(text="Which city do you mean?")]))
            return
        if "slow" in words:
            chunks = [f"chunk {i}. " for i in range(40)]
            pause = 0.25
        elif "count" in words:
            chunks = [f"Message {self.messages[context_id]} in this conversation."]
            pause = 0.01
        else:
            chunks = ["Sunny ", "in ", "Lisbon."]
            pause = 0.01
        for i, chunk in enumerate(chunks):
            if task_id in self.cancelled:
                return
            await updater.add_artifact(
                parts=[Part(text=chunk)], artifact_id="forecast", name="forecast", append=i > 0,
                last_chunk=i == len(chunks) - 1,
            )
            await asyncio.sleep(pause)
        await updater.update_status(
            TaskState.TASK_STATE_COMPLETED, metadata={"usage": {"inputTokens": 12, "outputTokens": 7}}
        )


class RequireBearer(BaseHTTPMiddleware):
    def __init__(self, app, token: str) -> None:
        super().__init__(app)
        self.token = token

    async def dispatch(self, request, call_next):
        if request.url.path == "/a2a" and request.headers.get("authorization") != f"Bearer {self.token}":
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        return await call_next(request)


SIGV4 = re.compile(
    r"AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request, "
    r"SignedHeaders=([a-z0-9;-]+), Signature=([0-9a-f]{64})"
)


class RequireSigV4(BaseHTTPMiddleware):
    def __init__(self, app, service: str, region: str) -> None:
        super().__init__(app)
        self.service, self.region = service, region
        self.key_id, self.secret = os.environ["A2A_SAMPLE_KEY_ID"], os.environ["A2A_SAMPLE_SECRET"]

    async def why_not(self, request) -> str | None:
        match = SIGV4.fullmatch(request.headers.get("authorization", ""))
        if not match:
            return "no SigV4 Authorization header"
        key_id, date, region, service, signed, signature = match.groups()
        if (key_id, region, service) != (self.key_id, self.region, self.service):
            return f"wrong credential scope {key_id}/{region}/{service}"
        amz_date = request.headers.get("x-amz-date", "")
        if not amz_date.startswith(date) or "host" not in signed.split(";"):
            return "x-amz-date or host not signed"
        at = datetime.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.timezone.utc)
        if abs((datetime.datetime.now(datetime.timezone.utc) - at).total_seconds()) > 300:
            return "x-amz-date is more than 5 minutes off"
        headers = {name: request.headers.get(name, "") for name in signed.split(";")}
        received = AWSRequest(method=request.method, url=str(request.url), headers=headers, data=await request.body())
        received.context["timestamp"] = amz_date
        auth = SigV4Auth(Credentials(self.key_id, self.secret, headers.get("x-amz-security-token")), service, region)
        expected = auth.signature(auth.string_to_sign(received, auth.canonical_request(received)), received)
        return None if hmac.compare_digest(expected, signature) else "the signature does not match the request"

    async def dispatch(self, request, call_next):
        why = await self.why_not(request)
        if why:
            return JSONResponse({"error": why}, status_code=403)
        return await call_next(request)


def app(host: str, port: int, token: str | None, sigv4: str | None = None) -> Starlette:
    card = AgentCard(
        name="weather",
        description="Tells the weather (a sample A2A agent).",
        version="1.0.0",
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="forecast", name="Forecast", description="A city's forecast.", tags=["weather"])],
        supported_interfaces=[
            AgentInterface(protocol_binding="JSONRPC", protocol_version="1.0", url=f"http://{host}:{port}/a2a")
        ],
    )
    handler = DefaultRequestHandler(agent_executor=WeatherExecutor(), task_store=InMemoryTaskStore(), agent_card=card)
    routes = create_agent_card_routes(agent_card=card) + create_jsonrpc_routes(request_handler=handler, rpc_url="/a2a")
    starlette = Starlette(routes=routes)
    if token:
        starlette.add_middleware(RequireBearer, token=token)
    if sigv4:
        service, region = sigv4.split(":")
        starlette.add_middleware(RequireSigV4, service=service, region=region)
    return starlette


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=41241)
    parser.add_argument("--token", default=None)
    parser.add_argument("--sigv4", default=None, metavar="SERVICE:REGION")
    args = parser.parse_args()
    served = app(args.host, args.port, args.token, args.sigv4)
    uvicorn.run(served, host=args.host, port=args.port, log_level="warning")
