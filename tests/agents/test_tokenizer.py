"""The locally trained tokenizer: exact round trips, digit splitting, the ChatML template."""

from __future__ import annotations

import gymnasium as gym
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import forkgym.envs
from forkgym.agents.tokenizer import (
    CHAT_TEMPLATE,
    CORPUS_ENVS,
    GOLD_RUN_KWARGS,
    SPECIAL_TOKENS,
    build_tokenizer,
    corpus_from_envs,
    render_chatml,
)
from forkgym.verifiers import MathVerifier

CORPUS_SEEDS = 16  # what the tests train on; the shipped default is 32
TEST_SEEDS = range(1000, 1004)  # episodes the tokenizer never saw


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    return corpus_from_envs(CORPUS_SEEDS)


@pytest.fixture(scope="module")
def tokenizer(corpus):
    return build_tokenizer(corpus, vocab_size=1024)


@pytest.fixture(scope="module")
def verifier():
    with MathVerifier(workers=0, cache_size=0) as v:
        yield v


def gold_episode(env_id: str, seed: int, verifier) -> list[dict[str, str]]:
    # the corpus's own way of making each env: gold code only, so no sandbox is needed
    env = gym.make(env_id, verifier=verifier, **GOLD_RUN_KWARGS.get(env_id, {}))
    obs, _ = env.reset(seed=seed)
    done = False
    while not done:
        obs, _, terminated, truncated, _ = env.step(env.gold_action())
        done = terminated or truncated
    env.close()
    return [dict(m) for m in obs["messages"]]


@pytest.fixture(scope="module")
def episodes(verifier) -> dict[str, list[list[dict[str, str]]]]:
    return {
        env_id: [gold_episode(env_id, seed, verifier) for seed in TEST_SEEDS]
        for env_id in forkgym.envs.ENVIRONMENTS
    }


def test_vocabulary_and_special_tokens(tokenizer):
    assert len(tokenizer) == 1024
    assert [tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS] == [0, 1, 2]
    assert tokenizer.eos_token == tokenizer.pad_token == "<|endoftext|>"
    assert tokenizer.unk_token is None
    vocab = tokenizer.get_vocab()
    from tokenizers.pre_tokenizers import ByteLevel

    assert set(ByteLevel.alphabet()) <= set(vocab)  # every byte has a token: nothing is unknown
    for token in SPECIAL_TOKENS:  # matched whole, never split, even glued to text
        assert tokenizer.encode(f"x{token}y")[1] == vocab[token]


def test_gold_trajectories_round_trip(tokenizer, episodes):
    vocab_size = len(tokenizer)
    for env_id, convs in episodes.items():
        for messages in convs:
            texts = [m["content"] for m in messages] + [
                render_chatml(messages),
                gym.make(env_id, **GOLD_RUN_KWARGS.get(env_id, {})).render_prompt(messages),
            ]
            for text in texts:
                ids = tokenizer.encode(text)
                assert all(0 <= i < vocab_size for i in ids)
                assert tokenizer.decode(ids) == text, (env_id, text[:80])


@settings(max_examples=150, deadline=None)
@given(text=st.text(max_size=200))
def test_any_text_round_trips(tokenizer, text):
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_awkward_text_round_trips(tokenizer):
    for text in [
        "  leading and trailing  ",
        "tabs\tand\r\nCRLF\n\n\nblank lines",
        "emoji 😀👍🏽, accents é e\u0301 (not NFC-normalised), CJK 计算, RTL שלום",
        "\x00\x01 control bytes \x7f",
        "$\\frac{1}{2}$ and \\boxed{-3/4} and 1,234.5e-6",
        "<|im_end|> typed by a user <|im_start|>",
    ]:
        assert tokenizer.decode(tokenizer.encode(text)) == text


def test_digits_are_single_tokens(tokenizer):
    ids = tokenizer.encode("1234567890")
    assert tokenizer.convert_ids_to_tokens(ids) == list("1234567890")
    ids = tokenizer.encode("Compute 72 * 871 = 62712.")
    tokens = tokenizer.convert_ids_to_tokens(ids)
    assert [t for t in tokens if any(c.isdigit() for c in t)] == list("7287162712")
    # no token of the vocabulary joins a digit with anything else
    for token in tokenizer.get_vocab():
        if any(c.isdigit() for c in token):
            assert len(token) == 1, token


def test_chat_template_renders_each_role(tokenizer):
    assert tokenizer.chat_template == CHAT_TEMPLATE
    messages = [
        {"role": "system", "content": "Be exact."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "<tool_call>x</tool_call>"},
        {"role": "tool", "content": "4"},
        {"role": "assistant", "content": "$\\boxed{4}$"},
    ]
    expected = (
        "<|im_start|>system\nBe exact.<|im_end|>\n"
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
        "<|im_start|>assistant\n<tool_call>x</tool_call><|im_end|>\n"
        "<|im_start|>tool\n4<|im_end|>\n"
        "<|im_start|>assistant\n$\\boxed{4}$<|im_end|>\n"
    )
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    assert text == expected == render_chatml(messages)
    prompt = tokenizer.apply_chat_template(messages[:2], tokenize=False, add_generation_prompt=True)
    assert prompt.endswith("<|im_end|>\n<|im_start|>assistant\n")
    assert prompt == render_chatml(messages[:2], add_generation_prompt=True)
    ids = tokenizer.apply_chat_template(
        messages[:2], tokenize=True, add_generation_prompt=True, return_dict=False
    )
    assert ids == tokenizer.encode(prompt)
    assert ids[-3:] == [1, tokenizer.convert_tokens_to_ids("assistant"), tokenizer.encode("\n")[0]]
    with pytest.raises(Exception, match="unsupported role"):
        tokenizer.apply_chat_template([{"role": "robot", "content": "hi"}], tokenize=False)
    with pytest.raises(ValueError, match="unsupported role"):
        render_chatml([{"role": "robot", "content": "hi"}])


@pytest.mark.parametrize("env_id", ["forkgym/Calculator-v0", "forkgym/Inventory-v0"])
def test_prefix_property_on_a_tool_conversation(tokenizer, episodes, env_id):
    messages = episodes[env_id][0]
    roles = [m["role"] for m in messages]
    assert roles.count("tool") >= 1 and roles.count("assistant") >= 2
    full = tokenizer.apply_chat_template(messages, tokenize=False)
    full_ids = tokenizer.encode(full)
    for k in range(1, len(messages)):
        prefix = tokenizer.apply_chat_template(messages[:k], tokenize=False)
        assert full.startswith(prefix)
        # tokens too: the prefix's ids followed by the suffix's ids are the whole's ids
        assert tokenizer.encode(prefix) + tokenizer.encode(full[len(prefix) :]) == full_ids
        if messages[k]["role"] == "assistant":
            cue = tokenizer.apply_chat_template(
                messages[:k], tokenize=False, add_generation_prompt=True
            )
            assert full.startswith(cue)
            turn = full[len(cue) :].split("<|im_start|>")[0]
            assert turn == messages[k]["content"] + "<|im_end|>\n"  # ends with <|im_end|> then \n
            cue_ids = tokenizer.encode(cue)
            assert full_ids[: len(cue_ids)] == cue_ids


def test_two_digit_arithmetic_prompt_is_short(tokenizer, capsys):
    env = gym.make("forkgym/Arithmetic-v0")
    lengths = []
    for seed in range(20):
        obs, _ = env.reset(seed=seed)
        ids = tokenizer.apply_chat_template(
            list(obs["messages"]), tokenize=True, add_generation_prompt=True, return_dict=False
        )
        lengths.append(len(ids))
    user_only = tokenizer.encode(obs["messages"][-1]["content"])
    with capsys.disabled():
        print(
            f"\n2-digit arithmetic prompt with system prompt and chat markup: {min(lengths)}-"
            f"{max(lengths)} tokens; the user message alone: {len(user_only)} tokens"
        )
    assert max(lengths) <= 64


def test_training_is_deterministic_and_respects_vocab_size(corpus, tokenizer):
    again = build_tokenizer(corpus, vocab_size=1024)
    assert again.backend_tokenizer.to_str() == tokenizer.backend_tokenizer.to_str()
    smaller = build_tokenizer(corpus[:50], vocab_size=300)
    assert len(smaller) == 300
    with pytest.raises(ValueError, match="vocab_size"):
        build_tokenizer(corpus[:5], vocab_size=200)


def test_corpus_covers_every_env_and_its_messages(corpus):
    text = "\n".join(corpus)
    assert len(corpus) == 2 * CORPUS_SEEDS * len(CORPUS_ENVS)
    assert set(CORPUS_ENVS) <= set(forkgym.envs.ENVIRONMENTS)
    for needle in [
        "<|im_start|>system\n",
        "<|im_start|>tool\n",
        "That answer is not correct.",  # math feedback
        "I could not find a final answer",
        "error: could not parse the tool call",  # tool errors
        "<calculator>",  # the tags tool-call format
        "[stdout]",  # a real python tool result
        '"quantity"',  # a real inventory record
        "\\frac",  # the MATH-style sample
    ]:
        assert needle in text, needle
    assert corpus_from_envs(2) == corpus_from_envs(2)


def test_an_env_outside_the_corpus_still_encodes_exactly(tiny_model_dir):
    """Environments registered after the default tokenizer was built are not in its corpus
    (so the default model stays byte-identical); their text round-trips all the same."""
    import gymnasium as gym

    from forkgym.agents.models import load_tokenizer

    tokenizer = load_tokenizer(tiny_model_dir)
    later = sorted(set(forkgym.envs.ENVIRONMENTS) - set(CORPUS_ENVS))
    assert later  # premise: CheckedSteps-v0 came later
    for env_id in later:
        env = gym.make(env_id)
        env.reset(seed=0)
        text = env.unwrapped.gold_action() + " " + env.unwrapped.task.prompt
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert tokenizer.decode(ids) == text


# -- tools: the Hermes format that TRL's and vLLM's parsers read --------------------------------

CALC_TOOL = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression exactly.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string", "description": "the expression"}},
            "required": ["expression"],
        },
    },
}


def test_tools_render_as_forkgyms_hermes_instructions(tokenizer):
    from forkgym.envs.tool_parsers import HermesParser

    messages = [{"role": "system", "content": "Be exact."}, {"role": "user", "content": "2+2?"}]
    text = tokenizer.apply_chat_template(
        messages, tools=[CALC_TOOL], tokenize=False, add_generation_prompt=True
    )
    assert text == render_chatml(messages, add_generation_prompt=True, tools=[CALC_TOOL])
    # the same words an environment's hermes parser writes into its system prompt
    instructions = HermesParser().instructions([CALC_TOOL["function"]])
    assert text.startswith(f"<|im_start|>system\nBe exact.\n\n{instructions}<|im_end|>\n")
    assert text.count("<|im_start|>system") == 1
    # without a system message the tools still get a system turn of their own
    alone = tokenizer.apply_chat_template(messages[1:], tools=[CALC_TOOL], tokenize=False)
    assert (
        alone == f"<|im_start|>system\n{instructions}<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n"
    )


def test_openai_tool_calls_render_and_parse_back(tokenizer):
    call = {
        "type": "function",
        "function": {"name": "calculator", "arguments": {"expression": "2+2"}},
    }
    messages = [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1_0", "name": "calculator", "content": "4"},
        {"role": "assistant", "content": "Twice:", "tool_calls": [call, call]},
    ]
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    assert text == render_chatml(messages)
    block = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "2+2"}}\n</tool_call>'
    assert f"<|im_start|>assistant\n{block}<|im_end|>\n" in text
    assert f"<|im_start|>assistant\nTwice:\n{block}\n{block}<|im_end|>\n" in text
    assert "<|im_start|>tool\n4<|im_end|>\n" in text
    # arguments as a JSON string (what OpenAI clients send) render the same
    as_string = {
        "type": "function",
        "function": {"name": "calculator", "arguments": '{"expression": "2+2"}'},
    }
    assert render_chatml([{"role": "assistant", "content": "", "tool_calls": [as_string]}]) == (
        f"<|im_start|>assistant\n{block}<|im_end|>\n"
    )
    # transformers' response parser reads the calls back (what TRL's tool loop does)
    parsed = tokenizer.parse_response(f"Twice:\n{block}\n{block}<|im_end|>", prefix="")
    assert parsed == {"role": "assistant", "content": "Twice:", "tool_calls": [call, call]}
    assert tokenizer.parse_response("$\\boxed{4}$<|im_end|>", prefix="") == {
        "role": "assistant",
        "content": "$\\boxed{4}$",
    }


def test_env_tool_conversation_round_trips_through_the_template(tokenizer, verifier):
    """An environment's messages render as exactly the text the model wrote (its calls are not
    rendered twice), and the calls the env reports are the ones the parser reads back."""
    env = gym.make("forkgym/Calculator-v0", verifier=verifier)
    obs, _ = env.reset(seed=1000)
    action = env.unwrapped.gold_action()
    obs, *_ = env.step(action)
    assistant, tool_message = obs["messages"][-2], obs["messages"][-1]
    assert assistant["content"] == action
    assert assistant["tool_calls"] == [
        {
            "id": "call_1_0",
            "type": "function",
            "function": {
                "name": "calculator",
                "arguments": {"expression": env.unwrapped.task.data["expression"]},
            },
        }
    ]
    assert tool_message["tool_call_id"] == "call_1_0" and tool_message["name"] == "calculator"
    plain = [{"role": m["role"], "content": m["content"]} for m in obs["messages"]]
    rendered = tokenizer.apply_chat_template(list(obs["messages"]), tokenize=False)
    assert rendered == tokenizer.apply_chat_template(plain, tokenize=False)
    parsed = tokenizer.parse_response(action + "<|im_end|>", prefix="")
    assert parsed["tool_calls"] == [
        {k: v for k, v in c.items() if k != "id"} for c in assistant["tool_calls"]
    ]
    # rendering the parsed (OpenAI-shaped) message gives back the model's text
    assert render_chatml([parsed]) == render_chatml([{"role": "assistant", "content": action}])
    env.close()
