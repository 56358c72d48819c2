"""The OpenAI-compatible client against a local stub server (127.0.0.1 only, self-stopping)."""

import socket
import time

import pytest

from eff_graph.remindrag import (
    Completion,
    KnowledgeGraph,
    LLMProtocolError,
    OpenAICompatibleClient,
    ReMindRAG,
    UsageMeter,
)
from eff_graph.remindrag.embed import HashingEmbedder

MSG = [{"role": "user", "content": "Hello there"}]


def test_request_format_and_reply_parsing(stub_llm):
    client = OpenAICompatibleClient(stub_llm.url, api_key="sk-test", model="tiny-model", timeout=5)
    out = client.complete(MSG, task="judge", context={"big": "structure"}, max_tokens=64)
    assert out == Completion("ok\n```cot-ans\nyes\n```", 11, 7)
    (req,) = stub_llm.requests
    assert req["path"] == "/v1/chat/completions"
    assert req["headers"]["Authorization"] == "Bearer sk-test"
    assert req["headers"]["Content-Type"] == "application/json"
    assert req["body"] == {
        "model": "tiny-model",
        "messages": MSG,
        "temperature": 0.0,
        "max_tokens": 64,
    }
    client.close()


def test_base_url_with_v1_and_without_key_or_usage(stub_llm):
    with OpenAICompatibleClient(stub_llm.url + "/v1/", model="m") as client:
        out = client.complete(
            [{"role": "user", "content": "NOUSAGE"}, {"role": "user", "content": "two words"}]
        )
    req = stub_llm.requests[-1]
    assert req["path"] == "/v1/chat/completions" and "Authorization" not in req["headers"]
    assert (out.prompt_tokens, out.completion_tokens) == (
        3,
        len(out.text.split()),
    )  # whitespace counts


def test_http_errors_timeouts_and_bad_bodies_surface_clearly(stub_llm):
    client = OpenAICompatibleClient(stub_llm.url, model="m", timeout=0.3)
    with pytest.raises(ConnectionError, match=r"HTTP 500.*model exploded"):
        client.complete([{"role": "user", "content": "FAIL"}])
    t0 = time.perf_counter()
    with pytest.raises(TimeoutError, match=r"timed out after 0\.3 s"):
        client.complete([{"role": "user", "content": "SLOW"}])
    assert time.perf_counter() - t0 < 1.4  # the client gave up before the server answered
    with pytest.raises(LLMProtocolError, match="choices"):
        client.complete([{"role": "user", "content": "BADJSON"}])
    with socket.socket() as s:  # a port on 127.0.0.1 that nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ConnectionError, match="could not reach"):
        OpenAICompatibleClient(f"http://127.0.0.1:{port}", model="m", timeout=2).complete(MSG)


def test_client_argument_errors():
    with pytest.raises(ValueError, match="base_url"):
        OpenAICompatibleClient("localhost:8000", model="m")
    with pytest.raises(ValueError, match="model"):
        OpenAICompatibleClient("http://127.0.0.1:1", model="")
    with pytest.raises(ValueError, match="timeout"):
        OpenAICompatibleClient("http://127.0.0.1:1", model="m", timeout=0)
    with pytest.raises(TypeError, match="messages"):
        OpenAICompatibleClient("http://127.0.0.1:1", model="m").complete([])


def test_remindrag_runs_through_the_http_client_and_meters_usage(stub_llm):
    kg = KnowledgeGraph()
    kg.add_chunk("1", "Vorlax is made by Quentico.")
    kg.add_relation("Vorlax", "is made by", "Quentico", "1")
    meter = UsageMeter(OpenAICompatibleClient(stub_llm.url, model="m", timeout=5))
    result = ReMindRAG(kg, meter, HashingEmbedder(64)).query("Who makes Vorlax?")
    # the stub says "yes" to everything: judge (sufficient at once) + answer
    assert result.llm_calls == 2 and result.answer == "yes"
    assert (result.prompt_tokens, result.completion_tokens) == (22, 14)
    assert (meter.calls, meter.prompt_tokens) == (2, 22)
    assert "Vorlax is made by Quentico." in stub_llm.requests[0]["body"]["messages"][0]["content"]
    meter.reset()
    assert (meter.calls, meter.prompt_tokens, meter.completion_tokens) == (0, 0, 0)
