"""A frozen policy behind a running OpenAI-compatible completions server (``vllm serve``, or
any server with ``POST /v1/completions``), over httpx.

Prompts are sent as token ids (the completions API accepts a list of integers as ``prompt``),
one HTTP request per branch so every branch carries its own seed, several in flight at once.
vLLM's extensions make the episode token-exact: ``return_token_ids`` (the sampled ids come
back), ``stop_token_ids`` and ``ignore_eos`` (the same stop rule as the other backends),
``logprobs: 0`` (the sampled token's log-prob). The log-probs are the server's: they follow
forkgym's convention (full vocabulary at the request's temperature) only when the server runs
with ``--logprobs-mode processed_logprobs`` and top-p is 1 (docs/vllm-gpu.md).

A server that returns no token ids (a plain OpenAI-style server) is usable for evaluation
only: its text is re-tokenised, which need not give the ids it sampled, and the log-probs are
NaN, so nothing can train on them by accident. The policy warns once when that happens, and
:attr:`OpenAIPolicy.token_exact` says which kind of server it met.

The weights are the server's: :meth:`sync_weights` accepts only a version (a frozen policy),
and the ``openai`` backend is refused for training.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import torch

from ...seeds import generator
from .policy import Generation, GenerationRequest, Policy, SamplingParams, request_seeds

__all__ = ["OpenAIPolicy", "ServerError", "completion_body", "parse_completion"]


class ServerError(RuntimeError):
    """The server answered with an error, or with something that is not a completion."""


def completion_body(
    model: str, prompt_ids: Sequence[int], params: SamplingParams, seed: int | None
) -> dict[str, Any]:
    """The JSON body of one completions request (see the module docstring)."""
    body: dict[str, Any] = {
        "model": model,
        "prompt": [int(t) for t in prompt_ids],
        "max_tokens": params.max_new_tokens,
        "n": 1,
        "logprobs": 0,
        "stop_token_ids": list(params.stop_token_ids),
        "ignore_eos": True,
        "skip_special_tokens": False,
        "include_stop_str_in_output": True,
        "return_token_ids": True,
        "return_tokens_as_token_ids": True,
    }
    if params.greedy:
        body["temperature"] = 0.0
    else:
        # every other sampling control spelled out: a field left out takes the server's
        # default, which can come from the checkpoint's generation_config.json
        body.update(
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=0,
            min_p=0.0,
            repetition_penalty=1.0,
            presence_penalty=0.0,
            frequency_penalty=0.0,
            seed=seed,
        )
    return body


def _ids_from_tokens(tokens: Sequence[str]) -> list[int] | None:
    """vLLM's ``return_tokens_as_token_ids`` spells each token ``token_id:123``."""
    ids = []
    for token in tokens:
        if not isinstance(token, str) or not token.startswith("token_id:"):
            return None
        ids.append(int(token.split(":", 1)[1]))
    return ids


def parse_completion(
    data: Mapping[str, Any], stop_token_ids: Sequence[int], tokenizer: Any | None = None
) -> tuple[Generation, bool]:
    """``(generation, token_exact)`` from a completions response of one choice."""
    try:
        choice = data["choices"][0]
    except (KeyError, IndexError, TypeError):
        raise ServerError(f"not a completion response: {str(data)[:200]}") from None
    logprobs = choice.get("logprobs") or {}
    ids = choice.get("token_ids")
    if ids is None and logprobs.get("tokens") is not None:
        ids = _ids_from_tokens(logprobs["tokens"])
    exact = ids is not None
    if exact:
        values = logprobs.get("token_logprobs")
        if values is None or len(values) != len(ids):
            values = [math.nan] * len(ids)
    else:
        if tokenizer is None:
            raise ServerError("the server returned no token ids and there is no tokenizer")
        ids = list(tokenizer(choice.get("text", ""), add_special_tokens=False)["input_ids"])
        values = [math.nan] * len(ids)
    ids = [int(t) for t in ids]
    stopped = bool(ids) and ids[-1] in stop_token_ids
    finish = (
        "stop" if stopped or (not exact and choice.get("finish_reason") == "stop") else "length"
    )
    generation = Generation(
        token_ids=tuple(ids),
        logprobs=tuple(float("nan") if v is None else float(v) for v in values),
        finish_reason=finish,
    )
    return generation, exact


class OpenAIPolicy(Policy):
    """The Policy protocol over a completions server; see the module docstring.

    ``base_url`` ends in ``/v1``. ``model``: the served model's name (default: the first of
    ``GET /models``). ``concurrency``: requests in flight at once.
    """

    def __init__(
        self,
        base_url: str,
        tokenizer: Any | None = None,
        *,
        model: str | None = None,
        api_key: str | None = None,
        seed: int = 0,
        timeout_s: float = 300.0,
        concurrency: int = 16,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.Client(
            base_url=base_url.rstrip("/"), headers=headers, timeout=timeout_s
        )
        self.tokenizer = tokenizer
        self.concurrency = concurrency
        self.model = model or self._first_model()
        self.token_exact: bool | None = None  # None until the first answer
        self._seed_stream = generator(seed)
        self._version = 0

    def _first_model(self) -> str:
        data = self._request("GET", "/models")
        try:
            return str(data["data"][0]["id"])
        except (KeyError, IndexError, TypeError):
            raise ServerError(f"GET /models listed no model: {str(data)[:200]}") from None

    def _request(self, method: str, path: str, body: Any | None = None) -> Any:
        try:
            response = self.client.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise ServerError(f"{method} {self.client.base_url}{path}: {exc}") from exc
        if response.status_code >= 400:
            raise ServerError(
                f"{method} {path} answered {response.status_code}: {response.text[:500]}"
            )
        try:
            return response.json()
        except ValueError:
            raise ServerError(f"{method} {path} answered non-JSON: {response.text[:200]}") from None

    # -- Policy protocol ------------------------------------------------------------------------

    @property
    def weight_version(self) -> int:
        return self._version

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        requests = list(requests)
        seeds = request_seeds(requests, self._seed_stream)
        bodies = [
            completion_body(self.model, r.prompt_ids, r.params, seed)
            for r, seed in zip(requests, seeds, strict=True)
        ]

        def one(i: int) -> tuple[Generation, bool]:
            data = self._request("POST", "/completions", bodies[i])
            return parse_completion(data, requests[i].params.stop_token_ids, self.tokenizer)

        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            answers = list(pool.map(one, range(len(requests))))
        exact = all(e for _, e in answers)
        if answers and not exact and self.token_exact is not False:
            warnings.warn(
                f"{self.client.base_url} returns no token ids: continuations are re-tokenised "
                "from text and have no log-probs; use this server for evaluation only",
                RuntimeWarning,
                stacklevel=2,
            )
        if answers:
            self.token_exact = exact if self.token_exact is None else self.token_exact and exact
        return [g for g, _ in answers]

    def logprobs(
        self, sequences: Sequence[Sequence[int]], starts: Sequence[int], temperature: float = 1.0
    ) -> list[torch.Tensor]:
        raise NotImplementedError("the openai backend generates; it does not score sequences")

    def sync_weights(
        self, weights: torch.nn.Module | Mapping[str, Any] | None = None, version: int | None = None
    ) -> dict[str, float]:
        if weights is not None:
            raise RuntimeError("the openai backend serves a frozen policy: it takes no weights")
        self._version = self._version + 1 if version is None else int(version)
        return {}

    def close(self) -> None:
        self.client.close()
