#!/usr/bin/env python3
"""Memory of `orchestrator serve` over repeated bursts of dropped streams (a bounded soak).

Starts the release binary on a temporary store, with a small OpenAI-compatible model server in
this process: the orchestrator model calls `ask_shopping`, the shopping model streams a word
every 50 ms for about ten seconds. Each burst opens BURST streams at once, reads each one up to
its first event and hangs up; once the server has settled, the script reads the serve process's
RSS, threads and open file descriptors from /proc. Many bursts tell a leak (RSS grows with every
burst) from allocator retention (RSS rises once, then stays flat).

    cargo build --release -p orchestrator
    python3 scripts/soak_burst.py                      # 20 bursts of 500
    python3 scripts/soak_burst.py --env MALLOC_ARENA_MAX=2

Standard library only; bounded: every wait has a timeout, and the run stops after --bursts.
"""

import argparse
import asyncio
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
WORDS = 200
WORD_GAP = 0.05


def chunk(model, delta, finish=None):
    body = {
        "id": "chatcmpl-soak",
        "object": "chat.completion.chunk",
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


async def model_server(reader, writer):
    """One request of the scripted OpenAI-compatible server, then close."""
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
        length = 0
        for line in head.decode("latin-1").split("\r\n"):
            if line.lower().startswith("content-length:"):
                length = int(line.split(":", 1)[1])
        request = json.loads(await asyncio.wait_for(reader.readexactly(length), 30))
        model = request.get("model", "")
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
        )
        if model == "orch":
            call = {
                "index": 0,
                "id": "call_1",
                "type": "function",
                "function": {"name": "ask_shopping", "arguments": json.dumps({"query": "coffee deals"})},
            }
            writer.write(chunk(model, {"role": "assistant", "tool_calls": [call]}))
            writer.write(chunk(model, {}, "tool_calls"))
        else:
            for i in range(WORDS):
                writer.write(chunk(model, {"content": f"word{i} "}))
                await writer.drain()
                await asyncio.sleep(WORD_GAP)
            writer.write(chunk(model, {}, "stop"))
        writer.write(b"data: [DONE]\n\n")
        await writer.drain()
    except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError, ValueError):
        pass
    finally:
        writer.close()


def proc_status(pid):
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    rss_kib = int(fields["VmRSS"].split()[0])
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return rss_kib, int(fields["Threads"]), fds


async def one_stream(host, port, got_first):
    """Opens a chat stream, reads up to its first event, waits for the burst, hangs up."""
    body = json.dumps({"message": "find me coffee deals"}).encode()
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 30)
    writer.write(
        b"POST /chat HTTP/1.1\r\nhost: soak\r\ncontent-type: application/json\r\n"
        + f"content-length: {len(body)}\r\n\r\n".encode()
        + body
    )
    seen = b""
    try:
        while b"event: thinking" not in seen:
            data = await asyncio.wait_for(reader.read(4096), 30)
            if not data:
                break
            seen += data
        return b" 200 " in seen[:20]
    finally:
        got_first.append(writer)


async def burst(host, port, size):
    writers = []
    results = await asyncio.gather(
        *(one_stream(host, port, writers) for _ in range(size)), return_exceptions=True
    )
    for w in writers:
        w.close()
    return sum(1 for r in results if r is True)


async def settle(pid, timeout=15.0):
    """Waits until the process's RSS and fds stop changing (or `timeout`)."""
    last, stable, deadline = None, 0, time.monotonic() + timeout
    while time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        now = proc_status(pid)
        stable = stable + 1 if now == last else 0
        last = now
        if stable >= 2:
            break
    return last


async def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--binary", default=str(ROOT / "target/release/orchestrator"))
    p.add_argument("--bursts", type=int, default=20)
    p.add_argument("--burst", type=int, default=500, help="streams per burst")
    p.add_argument("--env", action="append", default=[], help="KEY=VALUE for the serve process")
    args = p.parse_args()
    if not os.path.exists(args.binary):
        sys.exit(f"{args.binary} is missing: run `cargo build --release -p orchestrator`")

    model = await asyncio.start_server(model_server, "127.0.0.1", 0, backlog=4096)
    model_port = model.sockets[0].getsockname()[1]
    store = tempfile.TemporaryDirectory(prefix="baton-soak-")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "FORETHOUGHT_", "BATON_"))}
    env.update(
        OPENAI_BASE_URL=f"http://127.0.0.1:{model_port}/v1",
        BATON_ORCHESTRATOR_MODEL="orch",
        BATON_SHOPPING_MODEL="shop",
        BATON_STORE_PATH=os.path.join(store.name, "store.redb"),
        BATON_MAX_CONNECTIONS=str(max(args.burst * 2, 1024)),
    )
    env.update(kv.split("=", 1) for kv in args.env)
    serve = subprocess.Popen(
        [args.binary, "serve", "--addr", "127.0.0.1:0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = serve.stdout.readline().strip()
        host, port = line.removeprefix("listening on http://").rsplit(":", 1)
        pid = serve.pid
        await asyncio.sleep(0.3)
        idle = proc_status(pid)
        print(f"serve pid {pid}; env {args.env or 'default'}; {args.bursts} bursts of {args.burst} dropped streams")
        store_file = env["BATON_STORE_PATH"]
        print(f"{'burst':>5} {'ok':>5} {'RSS MiB':>8} {'Δ MiB':>7} {'threads':>7} {'fds':>5} {'store MiB':>9}")
        print(f"{'idle':>5} {'':>5} {idle[0] / 1024:>8.1f} {'':>7} {idle[1]:>7} {idle[2]:>5}")
        rows, prev = [], idle[0]
        for i in range(1, args.bursts + 1):
            ok = await burst(host, int(port), args.burst)
            rss, threads, fds = await settle(pid)
            rows.append(rss)
            size = os.path.getsize(store_file) / 2**20
            print(
                f"{i:>5} {ok:>5} {rss / 1024:>8.1f} {(rss - prev) / 1024:>+7.1f} {threads:>7} {fds:>5} {size:>9.1f}"
            )
            prev = rss
        half = len(rows) // 2
        if half:
            later = (rows[-1] - rows[half - 1]) / 1024 / (len(rows) - half)
            print(
                f"idle {idle[0] / 1024:.1f} MiB → after burst 1 {rows[0] / 1024:.1f} MiB, "
                f"max {max(rows) / 1024:.1f} MiB, end {rows[-1] / 1024:.1f} MiB; "
                f"second half: {later:+.2f} MiB per burst"
            )
    finally:
        serve.terminate()
        try:
            serve.wait(10)
        except subprocess.TimeoutExpired:
            serve.kill()
        model.close()
        store.cleanup()


if __name__ == "__main__":
    asyncio.run(main())
