"""forkgym's verifier service driven by OpenRLHF's own client code (openrlhf 0.11.2, installed
with --no-deps: `openrlhf/utils/agent.py`, `SingleTurnAgentExecutor`, the executor its vLLM
engine actor runs for every prompt when `--remote_rm_url` is set), labels built by its own
`openrlhf/datasets/prompts_dataset.py:preprocess_data`. Only the generation is scripted: the
executor's `llm_engine` is a vLLM engine on a GPU, which this machine has not; here it answers
each prompt with a fixed reply, as token ids of the same tokenizer.

Regressions of issue 26: a numeric or null label got a 422 that OpenRLHF retried five times
and then trained without the reward; the statuses were outside `extra_logs`, where OpenRLHF
never looked; a token on the service made every call fail."""

from __future__ import annotations

import asyncio
import importlib.metadata
from types import SimpleNamespace

import pytest

from tests.services.conftest import start_server

pytestmark = pytest.mark.integrations

try:
    OPENRLHF = importlib.metadata.version("openrlhf")
except importlib.metadata.PackageNotFoundError:
    pytest.skip("needs openrlhf: python3 dev.py test-integrations", allow_module_level=True)

from openrlhf.datasets.prompts_dataset import preprocess_data  # noqa: E402
from openrlhf.utils.agent import SingleTurnAgentExecutor  # noqa: E402

import forkgym.integrations.openrlhf as forkgym_openrlhf  # noqa: E402
from forkgym.agents.tokenizer import build_tokenizer  # noqa: E402

PROMPT = "<|im_start|>user\nCompute 8 * 9.<|im_end|>\n<|im_start|>assistant\n"


class ScriptedEngine:
    """Stands in for OpenRLHF's vLLM engine (GPU only): `generate` answers with a fixed reply,
    in the shape of a vLLM RequestOutput."""

    def __init__(self, tokenizer, reply: str) -> None:
        self.ids = tokenizer(reply, add_special_tokens=False)["input_ids"]
        self.reply = reply

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        out = SimpleNamespace(
            token_ids=list(self.ids), text=self.reply, finish_reason="stop", logprobs=None
        )
        return SimpleNamespace(outputs=[out])


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer([PROMPT + r"so it is \boxed{72}. Compute"], vocab_size=300)


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    server = start_server(tmp_path_factory.mktemp("svc") / "o.db", "--workers", "1")
    yield server
    server.stop()


def rollout(url: str, tokenizer, reply: str, label):
    """One sample through OpenRLHF's executor: generate, decode prompt+response with special
    tokens, POST it to the reward model, read `scores`/`rewards`/`extra_logs`."""
    executor = SingleTurnAgentExecutor(url)
    params = SimpleNamespace(max_tokens=64, logprobs=None)  # vllm.SamplingParams' fields read
    engine = ScriptedEngine(tokenizer, reply)
    return asyncio.run(executor.execute(PROMPT, label, params, 512, tokenizer, engine))


def label_of(row: dict, label_key: str | None):
    return preprocess_data(row, input_key="input", label_key=label_key)[1]


@pytest.mark.parametrize(
    ("row", "label_key", "reply", "reward", "status"),
    [
        ({"input": PROMPT, "answer": "72"}, "answer", r"so it is \boxed{72}", 1.0, "correct"),
        ({"input": PROMPT, "answer": 72}, "answer", r"so it is \boxed{72}", 1.0, "correct"),
        ({"input": PROMPT, "answer": 72}, "answer", r"so it is \boxed{71}", 0.0, "incorrect"),
        ({"input": PROMPT, "answer": None}, "answer", r"so it is \boxed{72}", 0.0, "invalid"),
        ({"input": PROMPT, "answer": 72}, None, r"so it is \boxed{72}", 0.0, "invalid"),
        # issue 48: these made the whole request a 422, every sample of it lost
        ({"input": PROMPT, "answer": [72]}, "answer", r"so it is \boxed{72}", 0.0, "invalid"),
        (
            {"input": PROMPT, "answer": {"value": 72}},
            "answer",
            r"so it is \boxed{72}",
            0.0,
            "invalid",
        ),
        ({"input": PROMPT, "answer": True}, "answer", r"so it is \boxed{1}", 0.0, "invalid"),
    ],
)
def test_openrlhfs_client_gets_a_float_per_sample_for_any_label(
    service, tokenizer, row, label_key, reply, reward, status
):
    label = label_of(row, label_key)
    out = rollout(f"{service.url}/get_reward", tokenizer, reply, label)
    assert out["reward"] == [reward] and out["scores"] == [reward], out
    logs = out["extra_logs"]
    assert logs[f"status_{status}"] == [1.0]
    assert sum(value[0] for value in logs.values()) == 1.0  # exactly one status per sample


def test_a_token_on_the_service_fails_openrlhfs_http_client(tmp_path, tokenizer, monkeypatch):
    """OpenRLHF's HTTP client sends no header: with a token every call is 401, retried five
    times a second apart, and the sample trains without a reward. The reward-function form
    (forkgym.integrations.openrlhf) sends the token."""
    server = start_server(tmp_path / "o.db", "--workers", "1", "--token", "s3cret")
    try:
        out = rollout(f"{server.url}/get_reward", tokenizer, r"\boxed{72}", "72")
        assert out["reward"] is None and out["extra_logs"] == {}
        monkeypatch.setenv("FORKGYM_VERIFIER_URL", server.url)
        monkeypatch.setenv("FORKGYM_TOKEN", "s3cret")
        out = rollout(forkgym_openrlhf.__file__, tokenizer, r"so it is \boxed{72}", 72)
        assert out["reward"] == [1.0] and out["extra_logs"]["status_correct"] == [1.0]
    finally:
        server.stop()


def test_the_reward_function_form_without_a_token(service, tokenizer, monkeypatch):
    monkeypatch.setenv("FORKGYM_VERIFIER_URL", service.url)
    monkeypatch.delenv("FORKGYM_TOKEN", raising=False)
    out = rollout(forkgym_openrlhf.__file__, tokenizer, r"so it is \boxed{71}", "72")
    assert out["reward"] == [0.0] and out["extra_logs"]["status_incorrect"] == [1.0]
