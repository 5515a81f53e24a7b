"""Starts the real things the browser tests talk to: the scripted model and Forethought servers
(tests/examples/scripted_server.rs), `orchestrator serve` and static sites on loopback. Every wait is
bounded."""

import functools
import http.server
import json
import os
import queue
import signal
import subprocess
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("BATON_BIN_DIR", ROOT / "target" / "debug"))
ORCH, SHOP = "orch", "shop"
MIXED_MESSAGE = "my receipt didn't scan and find me coffee deals"
SUPPORT_TEXT = "Receipts scan best in good light. I have re-queued yours for review."
SHOP_TEXT = "Here are three coffee deals: 2x points on Brand A, $1 off Brand B, and more."


def _reader(stream, lines):
    for line in iter(stream.readline, ""):
        lines.put(line)
    lines.put(None)


def _line(lines, what, timeout=20):
    try:
        line = lines.get(timeout=timeout)
    except queue.Empty:
        raise AssertionError(f"timed out waiting for {what}") from None
    if line is None:
        raise AssertionError(f"{what}: the process ended")
    return line


class Scripts:
    """The scripted servers; replies are queued per model name."""

    def __init__(self):
        self.proc = subprocess.Popen(
            [str(BIN / "examples" / "scripted_server")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.lines = queue.Queue()
        threading.Thread(target=_reader, args=(self.proc.stdout, self.lines), daemon=True).start()
        urls = json.loads(_line(self.lines, "the scripted servers' URLs"))
        self.model_base_url = urls["model_base_url"]
        self.forethought_base_url = urls["forethought_base_url"]

    def command(self, command):
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        answer = json.loads(_line(self.lines, f"an answer to {command}"))
        assert answer["ok"], answer
        return answer

    def push(self, model, **reply):
        self.command({"push": model, "reply": reply})

    def push_support(self, **reply):
        self.command({"push_forethought": reply})

    def forethought_requests(self):
        return self.command({"forethought_requests": True})["requests"]

    def requests(self, model):
        return self.command({"requests": model})["requests"]

    def mixed_turn(self, chunk_delay_ms=5, shop_delay_ms=0, support_delay_ms=0):
        """Queues a mixed turn: a preamble, then support and shopping answering."""
        self.push(
            ORCH,
            text="Let me check both.",
            tool_calls=[
                {"name": "ask_support", "arguments": {"query": "my receipt didn't scan", "intent_count": 2}},
                {"name": "ask_shopping", "arguments": {"query": "find me coffee deals", "intent_count": 2}},
            ],
            usage=[120, 30],
        )
        self.push_support(text=SUPPORT_TEXT, chunk_delay_ms=chunk_delay_ms, first_byte_delay_ms=support_delay_ms)
        self.push(SHOP, text=SHOP_TEXT, chunk_delay_ms=chunk_delay_ms, first_byte_delay_ms=shop_delay_ms, usage=[80, 25])

    def close(self):
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Serve:
    """`orchestrator serve` on a free loopback port (or `addr`) over the scripted servers, or with
    `config` (a YAML file) on the offline model."""

    def __init__(self, scripts, store_path, log_path, addr="127.0.0.1:0", heartbeat_secs=10, config=None):
        env = dict(os.environ)
        env.update(
            OPENAI_BASE_URL=scripts.model_base_url,
            BATON_ORCHESTRATOR_MODEL=ORCH,
            BATON_SHOPPING_MODEL=SHOP,
            FORETHOUGHT_BASE_URL=scripts.forethought_base_url,
            FORETHOUGHT_API_TOKEN="ft-test-token",
            BATON_STORE_PATH=str(store_path),
            BATON_MAX_RETRIES="0",
            BATON_FLUSH_INTERVAL_MS="1",
            BATON_FLUSH_BUDGET_MS="20",
            BATON_HEARTBEAT_SECS=str(heartbeat_secs),
            BATON_LOG="baton=info",
        )
        env.pop("BATON_CONFIG", None)
        env.pop("OPENAI_API_KEY", None)
        if config:
            env.pop("OPENAI_BASE_URL")
        self.store_path = Path(store_path)
        self.log_path = Path(log_path)
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [str(BIN / "orchestrator"), *(["--config", str(config)] if config else []), "serve", "--addr", addr],
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env=env,
        )
        lines = queue.Queue()
        threading.Thread(target=_reader, args=(self.proc.stdout, lines), daemon=True).start()
        line = _line(lines, "serve to listen")
        assert line.startswith("listening on "), line
        self.url = line.split("listening on ", 1)[1].strip()

    def wait_for_log(self, text, timeout=10):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.log_path.read_text():
                return
            time.sleep(0.05)
        raise AssertionError(f"serve never logged {text!r}:\n{self.log_path.read_text()}")

    def stop(self, sig=signal.SIGINT):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def stored(store_path, user, episode):
    """The stored messages of an episode (read after serve stopped: the store is one file)."""
    out = subprocess.run(
        [str(BIN / "examples" / "scripted_server"), "stored", str(store_path), user, episode],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return json.loads(out.stdout)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


class StaticSite:
    """A folder over plain HTTP on a free loopback port: an origin of its own."""

    def __init__(self, directory):
        handler = functools.partial(_QuietHandler, directory=str(directory))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.origin = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
