"""LLM clients for ReMindRAG: the ``LLMClient`` protocol, an OpenAI-compatible HTTP client for real use
and ``UsageMeter``, which counts calls and tokens of any client.

The core renders the same prompts for every client and always parses the reply *text*; it also passes
the step name and a structured context as keyword arguments (``task=``, ``context=``), which real
clients ignore and the deterministic :class:`~eff_graph.remindrag.reader.ScriptedReader` uses.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import httpx

from eff_shared.errors import check_positive, check_type

__all__ = [
    "Completion",
    "LLMClient",
    "LLMProtocolError",
    "OpenAICompatibleClient",
    "UsageMeter",
    "check_messages",
]


class LLMProtocolError(RuntimeError):
    """An LLM reply could not be used (no ```` ```cot-ans ```` block, unknown node id, malformed
    response body) after the allowed retries."""


@dataclass(frozen=True)
class Completion:
    text: str
    prompt_tokens: int
    completion_tokens: int


@runtime_checkable
class LLMClient(Protocol):
    def complete(self, messages: list[dict[str, str]], **kw: Any) -> Completion: ...


def check_messages(messages: Any) -> list[dict[str, str]]:
    """``messages`` itself; ``TypeError`` unless it is a non-empty list of chat messages (dicts
    with a ``role`` and a string ``content``)."""
    if not isinstance(messages, list) or not messages:
        raise TypeError("messages must be a non-empty list of {'role': ..., 'content': ...} dicts")
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("content"), str) or "role" not in m:
            raise TypeError("every message must be a dict with 'role' and a string 'content'")
    return messages


def whitespace_tokens(messages: list[dict[str, str]]) -> int:
    """Prompt size in whitespace-separated tokens over all messages (the scripted reader's bill)."""
    return sum(len(m["content"].split()) for m in messages)


class OpenAICompatibleClient:
    """Chat completions over HTTP: ``POST {base_url}/v1/chat/completions`` with ``model``,
    ``messages`` and ``temperature`` (0 by default), ``Authorization: Bearer <api_key>`` when a key is
    given. Works with any OpenAI-compatible server (vLLM, llama.cpp server, hosted APIs). A
    ``base_url`` that already ends in ``/v1`` is not extended twice.

    Reads ``choices[0].message.content`` and ``usage.prompt_tokens``/``usage.completion_tokens``
    (whitespace counts when the server sends no ``usage``). Errors: HTTP status ≥ 400 →
    ``ConnectionError`` naming the status; no answer within ``timeout`` seconds → ``TimeoutError``;
    unreachable server → ``ConnectionError``; a body without ``choices[0].message.content`` →
    :class:`LLMProtocolError`. Keyword arguments ``task``/``context`` are ignored; ``max_tokens``,
    ``seed``, ``temperature`` and ``stop`` are forwarded. Never used in tests against a real server.
    """

    FORWARDED = ("max_tokens", "seed", "temperature", "stop")

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        model: str = "gpt-4o-mini",
        timeout: float = 60.0,
        temperature: float = 0.0,
    ) -> None:
        check_type("base_url", base_url, str)
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {base_url!r}")
        check_type("model", model, str)
        if not model:
            raise ValueError("model must be a non-empty model name")
        check_positive("timeout", timeout)
        base = base_url.rstrip("/")
        self.url = base + ("/chat/completions" if base.endswith("/v1") else "/v1/chat/completions")
        self.model = model
        self.timeout = float(timeout)
        self.temperature = temperature
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._client = httpx.Client(timeout=self.timeout)

    def complete(self, messages: list[dict[str, str]], **kw: Any) -> Completion:
        messages = check_messages(messages)
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": m["role"], "content": m["content"]} for m in messages],
            "temperature": self.temperature,
        }
        payload.update({k: kw[k] for k in self.FORWARDED if k in kw})
        try:
            resp = self._client.post(self.url, json=payload, headers=self._headers)
        except httpx.TimeoutException as exc:
            raise TimeoutError(
                f"LLM request to {self.url} timed out after {self.timeout} s"
            ) from exc
        except httpx.TransportError as exc:
            raise ConnectionError(f"could not reach the LLM server at {self.url}: {exc}") from exc
        if resp.status_code >= 400:
            raise ConnectionError(
                f"LLM server returned HTTP {resp.status_code} for {self.url}: {resp.text[:300]}"
            )
        try:
            body = resp.json()
            text = body["choices"][0]["message"]["content"]
        except (json.JSONDecodeError, KeyError, IndexError, TypeError) as exc:
            raise LLMProtocolError(
                f"LLM server at {self.url} sent a body without choices[0].message.content: "
                f"{resp.text[:300]!r}"
            ) from exc
        if not isinstance(text, str):
            raise LLMProtocolError(f"choices[0].message.content is not a string: {text!r}")
        usage = body.get("usage") or {}
        prompt = usage.get("prompt_tokens")
        completion = usage.get("completion_tokens")
        return Completion(
            text,
            int(prompt) if prompt is not None else whitespace_tokens(messages),
            int(completion) if completion is not None else len(text.split()),
        )

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> OpenAICompatibleClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class UsageMeter:
    """Wraps any client; counts calls, prompt tokens and completion tokens (``reset()`` zeroes them)."""

    def __init__(self, client: LLMClient) -> None:
        if not hasattr(client, "complete"):
            raise TypeError(f"client must have a complete() method, got {type(client).__name__}")
        self.client = client
        self.reset()

    def reset(self) -> None:
        self.calls = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0

    def complete(self, messages: list[dict[str, str]], **kw: Any) -> Completion:
        out = self.client.complete(messages, **kw)
        self.calls += 1
        self.prompt_tokens += int(out.prompt_tokens)
        self.completion_tokens += int(out.completion_tokens)
        return out

    def snapshot(self) -> tuple[int, int, int]:
        return self.calls, self.prompt_tokens, self.completion_tokens
