"""Drives Baton's A2A endpoint with the official Python client (PyPI `a2a-sdk`), for
tests/tests/a2a.rs. Prints one JSON object: what the SDK parsed (ProtoJSON dicts), or the
SDK's error (`{"error": {"type", "message"}}`).

    baton_client.py URL USER stream TEXT [CONTEXT_ID]
    baton_client.py URL USER send TEXT
    baton_client.py URL USER cancel TEXT      # streams, cancels after the first text chunk
    baton_client.py URL USER get TASK_ID
    baton_client.py URL USER list
    baton_client.py URL USER subscribe TEXT   # sends without waiting, then subscribes to the task
    baton_client.py URL USER resume CONTEXT_ID DECISIONS_JSON   # a data part {"resume": [...]}
"""

import asyncio
import json
import sys

import httpx
from google.protobuf import struct_pb2
from google.protobuf.json_format import MessageToDict, ParseDict

from a2a.client import ClientConfig, create_client
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
)


def as_dict(message) -> dict:
    return MessageToDict(message)


def request(text: str, context_id: str | None = None) -> SendMessageRequest:
    message = Message(role=Role.ROLE_USER, message_id="m-" + str(abs(hash(text))), parts=[Part(text=text)])
    if context_id:
        message.context_id = context_id
    return SendMessageRequest(message=message)


async def main(url: str, user: str, command: str, args: list[str]) -> dict:
    http = httpx.AsyncClient(headers={"x-baton-user": user}, timeout=httpx.Timeout(30.0))
    client = await create_client(url, client_config=ClientConfig(streaming=command != "send", httpx_client=http))
    out: dict = {"card": as_dict(client._card)}  # noqa: SLF001 (the card the SDK resolved)
    try:
        if command in ("stream", "send"):
            out["items"] = [as_dict(i) async for i in client.send_message(request(args[0], *args[1:2]))]
        elif command == "cancel":
            items, cancelled = [], None
            async for item in client.send_message(request(args[0])):
                items.append(as_dict(item))
                if cancelled is None and item.HasField("artifact_update"):
                    task_id = item.artifact_update.task_id
                    cancelled = as_dict(await client.cancel_task(CancelTaskRequest(id=task_id)))
                    got = as_dict(await client.get_task(GetTaskRequest(id=task_id)))
                    out["get"] = got
            out["items"], out["cancel"] = items, cancelled
        elif command == "resume":
            data = ParseDict({"resume": json.loads(args[1])}, struct_pb2.Value())
            message = Message(role=Role.ROLE_USER, message_id="m-resume", context_id=args[0], parts=[Part(data=data)])
            out["items"] = [as_dict(i) async for i in client.send_message(SendMessageRequest(message=message))]
        elif command == "subscribe":
            polling = ClientConfig(streaming=False, polling=True, httpx_client=http)
            sender = await create_client(url, client_config=polling)
            (started,) = [i async for i in sender.send_message(request(args[0]))]
            out["started"] = as_dict(started)
            subscribe = SubscribeToTaskRequest(id=started.task.id)
            out["items"] = [as_dict(i) async for i in client.subscribe(subscribe)]
        elif command == "get":
            out["task"] = as_dict(await client.get_task(GetTaskRequest(id=args[0])))
        elif command == "list":
            out["tasks"] = as_dict(await client.list_tasks(ListTasksRequest()))
    except Exception as e:  # noqa: BLE001 (the test reads which error the SDK raised)
        out["error"] = {"type": type(e).__name__, "message": str(e)}
    finally:
        await client.close()
        await http.aclose()
    return out


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]))))
