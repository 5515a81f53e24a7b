"""Drives Baton's MCP server with the official Python MCP client (PyPI `mcp`).

    baton_client.py http URL AGENT TEXT
    baton_client.py stdio AGENT TEXT -- COMMAND [ARGS...]

Prints one JSON object: the tools listed (name, input schema), the agent's answer, whether it
is an error, the progress notifications received during the call, and the elicitation requests
(approvals) it answered.

With BATON_ELICIT set the client declares elicitation and answers every request: `approve`, or
`reject:<reason>`. Unset, it declares none (the server cannot ask).
"""

import os

import asyncio
import json
import sys
from datetime import timedelta

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamablehttp_client
from mcp import types

ELICITED = []


async def on_elicit(context, params):
    ELICITED.append({"message": params.message, "schema": params.requestedSchema})
    answer = os.environ["BATON_ELICIT"]
    if answer == "approve":
        return types.ElicitResult(action="accept", content={"approve": True})
    reason = answer.split(":", 1)[1] if ":" in answer else ""
    return types.ElicitResult(action="accept", content={"approve": False, "reason": reason})


def session_options():
    return {"elicitation_callback": on_elicit} if os.environ.get("BATON_ELICIT") else {}


async def drive(session, agent, text):
    await session.initialize()
    listed = await session.list_tools()
    progress = []

    async def on_progress(value, total, message):
        progress.append({"progress": value, "total": total, "message": message})

    result = await session.call_tool(
        agent,
        {"text": text},
        read_timeout_seconds=timedelta(seconds=60),
        progress_callback=on_progress,
    )
    answer = "".join(block.text for block in result.content if block.type == "text")
    return {
        "tools": [{"name": t.name, "input_schema": t.inputSchema} for t in listed.tools],
        "answer": answer,
        "is_error": bool(result.isError),
        "progress": progress,
        "elicited": ELICITED,
    }


async def main(argv):
    mode = argv[1]
    if mode == "http":
        url, agent, text = argv[2:5]
        async with streamablehttp_client(url) as (read, write, _):
            async with ClientSession(read, write, **session_options()) as session:
                return await drive(session, agent, text)
    agent, text = argv[2:4]
    command = argv[argv.index("--") + 1 :]
    params = StdioServerParameters(command=command[0], args=command[1:], env=None)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, **session_options()) as session:
            return await drive(session, agent, text)


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv))))
