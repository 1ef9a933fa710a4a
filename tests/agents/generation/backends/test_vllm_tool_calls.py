"""vLLM's Hermes tool parser (what `vllm serve --tool-call-parser hermes` runs) reads the calls
forkgym's tokenizer and environments write, and the OpenAI-shaped message it returns renders
back through forkgym's chat template to the very text the model generated."""

import gymnasium as gym
import pytest

pytestmark = pytest.mark.vllm
pytest.importorskip("vllm", reason="needs vLLM: python3 dev.py test-vllm")

import forkgym.envs  # noqa: E402, F401 - registers the environments
from forkgym.agents.tokenizer import build_tokenizer  # noqa: E402


@pytest.mark.parametrize("env_id", ["forkgym/Calculator-v0", "forkgym/Inventory-v0"])
def test_vllms_hermes_parser_round_trips_forkgyms_calls(env_id):
    import json

    from vllm.tool_parsers.hermes_tool_parser import Hermes2ProToolParser

    tokenizer = build_tokenizer(["<tool_call> calculator search_items 1 2 3"], vocab_size=300)
    env = gym.make(env_id)
    env.reset(seed=3)
    gold = env.unwrapped.gold_action()
    obs, *_ = env.step(gold)
    ours = next(m for m in reversed(obs["messages"]) if m["role"] == "assistant")
    parsed = Hermes2ProToolParser(tokenizer).extract_tool_calls(gold, None)
    assert parsed.tools_called
    assert [(c.function.name, json.loads(c.function.arguments)) for c in parsed.tool_calls] == [
        (c["function"]["name"], c["function"]["arguments"]) for c in ours["tool_calls"]
    ]
    returned = {
        "role": "assistant",
        "content": parsed.content,
        "tool_calls": [c.model_dump() for c in parsed.tool_calls],
    }
    as_generated = [{"role": "assistant", "content": gold}]
    assert tokenizer.apply_chat_template(
        [returned], tokenize=False
    ) == tokenizer.apply_chat_template(as_generated, tokenize=False)
