"""A TCP proxy the browser tests put between Chromium and `orchestrator serve`: it forwards bytes
both ways and, on command, cuts every open connection (a reset, as when a network goes away), so
a test can break a stream mid-turn. It runs its own asyncio loop on a thread; every wait is bounded."""

import asyncio
import socket
import struct
import threading


class CuttingProxy:
    """Listens on a free loopback port and forwards each connection to `upstream` ("host:port")."""

    def __init__(self, upstream):
        self.upstream_host, port = upstream.rsplit(":", 1)
        self.upstream_port = int(port)
        self.loop = asyncio.new_event_loop()
        self.writers = set()  # both ends of every open connection
        self.sent = []  # what the browser sent, read by read (a request head is one), for assertions
        self.cuts = 0
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self.thread.start()
        if not ready.wait(10):
            raise AssertionError("the proxy did not start")
        self.url = f"http://127.0.0.1:{self.port}"

    def _run(self, ready):
        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = self.server.sockets[0].getsockname()[1]
        ready.set()
        self.loop.run_forever()

    async def _serve(self, client_reader, client_writer):
        try:
            upstream_reader, upstream_writer = await asyncio.wait_for(
                asyncio.open_connection(self.upstream_host, self.upstream_port), 10)
        except (OSError, asyncio.TimeoutError):
            _reset(client_writer)
            return
        self.writers |= {client_writer, upstream_writer}
        try:
            await asyncio.gather(
                self._pipe(client_reader, upstream_writer, record=True),
                self._pipe(upstream_reader, client_writer, record=False),
            )
        finally:
            self.writers -= {client_writer, upstream_writer}
            for w in (client_writer, upstream_writer):
                w.close()

    async def _pipe(self, reader, writer, record):
        try:
            while data := await reader.read(65536):
                if record:
                    self.sent.append(data)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            if not writer.is_closing():
                try:
                    writer.write_eof()
                except (OSError, RuntimeError):
                    pass

    def cut(self):
        """Resets every open connection, both sides; new connections are still accepted."""

        def reset_all():
            for w in list(self.writers):
                _reset(w)
            self.writers.clear()

        asyncio.run_coroutine_threadsafe(_call(reset_all), self.loop).result(10)
        self.cuts += 1

    def requests(self):
        """The request heads the browser sent through the proxy (method, target, headers)."""
        heads = []
        for data in list(self.sent):
            lines = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
            if lines[0].split(" ", 1)[0] not in {"GET", "POST", "OPTIONS"}:
                continue  # a request body
            method, target = lines[0].split(" ")[:2]
            headers = {k.strip().lower(): v.strip() for k, _, v in (l.partition(":") for l in lines[1:])}
            heads.append((method, target, headers))
        return heads

    def close(self):
        async def stop():
            self.server.close()
            for w in list(self.writers):
                _reset(w)
            # The reset ends every pipe; let each connection's task finish (bounded).
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            if tasks:
                await asyncio.wait(tasks, timeout=5)

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


async def _call(fn):
    fn()


def _reset(writer):
    """Closes with a TCP reset (SO_LINGER 0), not an orderly end: the peer sees a network error."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    writer.transport.abort()
