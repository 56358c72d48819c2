"""Fixtures of the eff-graph tests: small generated graphs, a small QA world, a local stub LLM server."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


@pytest.fixture(scope="session")
def small_pair():
    """A small, quick CSBM domain pair (source 60/28/13, target 40 per class, 3 classes)."""
    from eff_graph.data import csbm_domain_pair

    return csbm_domain_pair(
        num_classes=3, num_features=16, imbalance=5.0, source_max=60, target_per_class=40,
        p_in=(0.12, 0.08), p_out=0.01, seed=3,
    )  # fmt: skip


@pytest.fixture(scope="session")
def world():
    from eff_graph.data import multihop_world

    return multihop_world(seed=0)


class StubLLM:
    """An OpenAI-compatible stub on 127.0.0.1 (random free port) that records requests.

    Behaviour by the first message's content: ``"SLOW"`` sleeps ``slow_s`` before answering,
    ``"FAIL"`` answers HTTP 500, ``"BADJSON"`` sends a body without choices, ``"NOUSAGE"`` omits
    ``usage``; anything else gets ``reply`` with usage 11/7. A watchdog shuts the server down after
    ``lifetime_s`` even if a test forgets to."""

    def __init__(self, reply: str = "ok\n```cot-ans\nyes\n```", slow_s: float = 1.5,
                 lifetime_s: float = 60.0) -> None:  # fmt: skip
        self.reply, self.slow_s = reply, slow_s
        self.requests: list[dict[str, Any]] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stub.requests.append(
                    {"path": self.path, "headers": dict(self.headers), "body": body}
                )
                first = body["messages"][0]["content"]
                if first == "SLOW":
                    time.sleep(stub.slow_s)
                if first == "FAIL":
                    return self._send(500, {"error": {"message": "model exploded"}})
                if first == "BADJSON":
                    return self._send(200, {"id": "x", "object": "chat.completion"})
                out: dict[str, Any] = {
                    "choices": [{"message": {"role": "assistant", "content": stub.reply}}]
                }
                if first != "NOUSAGE":
                    out["usage"] = {"prompt_tokens": 11, "completion_tokens": 7}
                self._send(200, out)

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # e.g. a broken pipe after the client gave up on a SLOW request

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._watchdog = threading.Timer(lifetime_s, self.stop)
        self._watchdog.daemon = True
        self._stopped = False

    def start(self) -> StubLLM:
        self._thread.start()
        self._watchdog.start()
        return self

    def stop(self) -> None:
        if not self._stopped:
            self._stopped = True
            self._watchdog.cancel()
            self.server.shutdown()
            self.server.server_close()


@pytest.fixture
def stub_llm() -> Iterator[StubLLM]:
    stub = StubLLM().start()
    try:
        yield stub
    finally:
        stub.stop()
