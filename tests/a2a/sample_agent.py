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
"""

import argparse
import asyncio

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


def app(host: str, port: int, token: str | None) -> Starlette:
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
    return starlette


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=41241)
    parser.add_argument("--token", default=None)
    args = parser.parse_args()
    uvicorn.run(app(args.host, args.port, args.token), host=args.host, port=args.port, log_level="warning")
