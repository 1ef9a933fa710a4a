"""A small byte-level BPE tokenizer with a ChatML chat template, trained on the environments.

The default offline model needs a tokenizer that is made here, from nothing downloaded, and
that behaves like a real instruct model's tokenizer so that every code path (chat template,
special tokens, stop tokens, token-exact multi-turn episodes) is the one a hub model takes.

* **Byte-level BPE** (GPT-2 byte alphabet in the vocabulary from the start): any text encodes,
  nothing maps to an unknown token, and ``decode(encode(text)) == text`` exactly (no
  normaliser, no clean-up of spaces).
* **Pre-tokenizer**: Qwen2's split pattern, which isolates every digit (``\\p{N}``), so numbers
  are always spelled one digit per token and no merge ever spans digits: arithmetic is learnt
  per digit, and a number's tokens do not depend on its neighbours.
* **Special tokens**: ``<|endoftext|>`` (id 0; pad and eos), ``<|im_start|>`` (1) and
  ``<|im_end|>`` (2), which end every turn.
* **Chat template** (:data:`CHAT_TEMPLATE`), ChatML as in Qwen's instruct models::

      <|im_start|>{role}\\n{content}<|im_end|>\\n      for each message (system, user, assistant, tool)
      <|im_start|>assistant\\n                         with add_generation_prompt=True

  Every message renders independently of the others, so the rendering of a prefix of a
  conversation is a string prefix of the rendering of the whole (and the generation prompt is
  a prefix of the assistant turn that follows): rollout code tokenises only the new suffix. An
  assistant turn ends with ``<|im_end|>`` (the stop token the policy generates) and then
  ``\\n``, which the rollout code appends after the generated ids.

:func:`corpus_from_envs` renders what the registered environments say and expect (system
prompts, prompts, gold trajectories from really stepping each env, tool results, feedback and
tool error messages) in this template, and :func:`build_tokenizer` learns the merges from it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "CHAT_TEMPLATE",
    "EOS_TOKEN",
    "IM_END",
    "IM_START",
    "PRETOKENIZE_PATTERN",
    "RESPONSE_TEMPLATE",
    "SPECIAL_TOKENS",
    "build_tokenizer",
    "corpus_from_envs",
    "render_chatml",
    "render_tools",
]

EOS_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = (EOS_TOKEN, IM_START, IM_END)  # ids 0, 1, 2
ROLES = ("system", "user", "assistant", "tool")

# Qwen2's pre-tokenizer pattern: contractions, letter runs (with one leading non-letter such
# as a space or a backslash), single digits, punctuation runs, newlines, other whitespace.
PRETOKENIZE_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# A tool-capable conversation renders Hermes style (the format Qwen2.5 and Hermes models are
# trained on, and vLLM's and TRL's hermes/Qwen parsers read): the tools' JSON schemas in the
# system turn, one per line between <tools> and </tools>, in the words forkgym's own `hermes`
# tool parser writes into an environment's system prompt (so a model trained on forkgym's
# environments reads the same text when a trainer passes `tools=`), and each call as a JSON
# object between <tool_call> and </tool_call>. (Jinja cannot call Python, so the template holds
# these words itself; a test checks it against the parser's text.)
TOOLS_PREAMBLE = "You can call tools. Their signatures, as JSON schemas:\n<tools>\n"
TOOLS_POSTAMBLE = (
    "</tools>\nTo call a tool, write a JSON object with the tool's name and arguments between "
    "<tool_call> and </tool_call>, for example:\n"
)
TOOLS_CLOSING = (
    "The results come back in the next message. When you know the answer, reply without a "
    "tool call."
)
# Jinja; `\n` inside the string literals is a newline to Jinja. Whitespace control (`-`)
# everywhere, so the only text produced is the quoted text. An assistant message's
# `tool_calls` (OpenAI shape: {"type": "function", "function": {"name", "arguments"}}) are
# rendered after its content unless the content already holds them as text: forkgym's
# environments keep the model's exact words in `content` and add the calls they parsed from it.
CHAT_TEMPLATE = (
    r"""{%- if tools -%}
{{- '<|im_start|>system\n' -}}
{%- if messages and messages[0]['role'] == 'system' and messages[0]['content'] is string -%}
{{- messages[0]['content'] ~ '\n\n' -}}
{%- endif -%}
{{- '"""
    + TOOLS_PREAMBLE.replace("\n", "\\n")
    + r"""' -}}
{%- for tool in tools -%}
{%- set schema = tool['function'] if tool['function'] is defined else tool -%}
{{- schema | tojson(sort_keys=True) ~ '\n' -}}
{%- endfor -%}
{{- '"""
    + TOOLS_POSTAMBLE.replace("\n", "\\n").replace("'", "\\'")
    + r"""' -}}
{%- set first = tools[0]['function'] if tools[0]['function'] is defined else tools[0] -%}
{{- '<tool_call>\n{"name": ' ~ first['name'] | tojson ~ ', "arguments": {' -}}
{%- for name in ((first['parameters'] or {})['properties'] or {}) -%}
{{- (', ' if not loop.first else '') ~ name | tojson ~ ': "..."' -}}
{%- endfor -%}
{{- '}}\n</tool_call>\n' -}}
{{- '"""
    + TOOLS_CLOSING
    + r"""<|im_end|>\n' -}}
{%- endif -%}
{%- for message in messages -%}
{%- if message['role'] not in ['system', 'user', 'assistant', 'tool'] -%}
{{- raise_exception('unsupported role: ' ~ message['role'] ~ ' (system, user, assistant or tool)') -}}
{%- endif -%}
{%- if not (tools and loop.first and message['role'] == 'system') -%}
{%- set content = message['content'] if message['content'] is string else '' -%}
{{- '<|im_start|>' ~ message['role'] ~ '\n' ~ content -}}
{%- if message['role'] == 'assistant' and message['tool_calls'] and '<tool_call>' not in content -%}
{%- for call in message['tool_calls'] -%}
{%- set function = call['function'] if call['function'] is defined else call -%}
{%- set arguments = function['arguments'] if function['arguments'] is string else function['arguments'] | tojson -%}
{{- ('\n' if content or not loop.first else '') ~ '<tool_call>\n{"name": ' ~ function['name'] | tojson ~ ', "arguments": ' ~ arguments ~ '}\n</tool_call>' -}}
{%- endfor -%}
{%- endif -%}
{{- '<|im_end|>\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|im_start|>assistant\n' -}}
{%- endif -%}"""
)

# transformers' response parser (``tokenizer.parse_response``, what TRL's tool loop calls):
# the assistant's text up to <|im_end|>, and each <tool_call> block as an OpenAI-shaped call.
RESPONSE_TEMPLATE: dict[str, Any] = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "tool_calls": {
            "open": "<tool_call>",
            "close_pattern": r"</tool_call>\s*",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": "{content}"},
        },
        "content": {"close_pattern": r"<\|im_end\|>\s*", "content": "text"},
    },
}

_SPECIAL_SPLIT = re.compile("|".join(re.escape(t) for t in SPECIAL_TOKENS))


def _tool_schema(tool: Mapping[str, Any]) -> Mapping[str, Any]:
    return tool.get("function", tool)


def render_tools(tools: Sequence[Mapping[str, Any]]) -> str:
    """The tools part of the system turn: forkgym's ``hermes`` tool instructions."""
    from forkgym.envs.tool_parsers import HermesParser

    return HermesParser().instructions([dict(_tool_schema(t)) for t in tools])


def _render_calls(content: str, calls: Sequence[Mapping[str, Any]]) -> str:
    parts = []
    for i, call in enumerate(calls):
        function = call.get("function", call)
        arguments = function["arguments"]
        arguments = arguments if isinstance(arguments, str) else json.dumps(arguments)
        sep = "\n" if content or i else ""
        parts.append(
            f'{sep}<tool_call>\n{{"name": {json.dumps(function["name"])}, "arguments": {arguments}}}\n</tool_call>'
        )
    return "".join(parts)


def render_chatml(
    messages: Sequence[Mapping[str, Any]],
    add_generation_prompt: bool = False,
    tools: Sequence[Mapping[str, Any]] | None = None,
) -> str:
    """What :data:`CHAT_TEMPLATE` renders, in Python (no tokenizer needed)."""
    parts = []
    skip_system = False
    if tools:
        system = ""
        if (
            messages
            and messages[0]["role"] == "system"
            and isinstance(messages[0].get("content"), str)
        ):
            system, skip_system = messages[0]["content"] + "\n\n", True
        parts.append(f"{IM_START}system\n{system}{render_tools(tools)}{IM_END}\n")
    for i, message in enumerate(messages):
        role = message["role"]
        if role not in ROLES:
            raise ValueError(f"unsupported role: {role} (system, user, assistant or tool)")
        if skip_system and i == 0:
            continue
        content = message.get("content")
        content = content if isinstance(content, str) else ""
        calls = message.get("tool_calls") if role == "assistant" else None
        if calls and "<tool_call>" not in content:
            content += _render_calls(content, calls)
        parts.append(f"{IM_START}{role}\n{content}{IM_END}\n")
    if add_generation_prompt:
        parts.append(f"{IM_START}assistant\n")
    return "".join(parts)


def build_tokenizer(corpus: Iterable[str], vocab_size: int = 1024) -> Any:
    """Train a byte-level BPE tokenizer of at most ``vocab_size`` tokens (specials included).

    Returns a ``transformers.PreTrainedTokenizerFast`` with pad = eos = ``<|endoftext|>``, the
    ChatML :data:`CHAT_TEMPLATE`, and no space clean-up on decode. Special tokens inside the
    corpus texts are cut out before training (at encode time they are matched before
    pre-tokenisation, so merges never span them). Training is deterministic: the same corpus
    gives a byte-identical ``tokenizer.json``. The vocabulary is smaller than ``vocab_size``
    only if the corpus has too few distinct pairs to merge.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    if vocab_size < len(alphabet) + len(SPECIAL_TOKENS):
        raise ValueError(
            f"vocab_size must be >= {len(alphabet) + len(SPECIAL_TOKENS)} "
            f"(the 256 bytes and {len(SPECIAL_TOKENS)} special tokens), got {vocab_size}"
        )
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=sorted(alphabet),
        show_progress=False,
    )
    pieces = (piece for text in corpus for piece in _SPECIAL_SPLIT.split(text) if piece)
    tokenizer.train_from_iterator(pieces, trainer=trainer)
    for i, token in enumerate(SPECIAL_TOKENS):
        assert tokenizer.token_to_id(token) == i, "special tokens must take ids 0, 1, 2"
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=EOS_TOKEN,
        pad_token=EOS_TOKEN,
        extra_special_tokens=[IM_START, IM_END],
        clean_up_tokenization_spaces=False,
        chat_template=CHAT_TEMPLATE,
        response_template=RESPONSE_TEMPLATE,
    )


# -- the corpus ---------------------------------------------------------------------------------

# Each seed of an env uses one of its variants in turn, so every env contributes the same
# number of episodes whatever the number of variants. "feedback" and "tool_errors" play wrong
# turns first (to render the envs' feedback and tool error messages), then the gold trajectory.
_VARIANTS: dict[str, list[tuple[dict[str, Any], str]]] = {
    "forkgym/Arithmetic-v0": [
        ({}, "gold"),
        ({"operations": "+-*/"}, "gold"),
        ({"level": 0}, "gold"),
        ({"level": 3}, "gold"),
        ({"max_attempts": 3}, "feedback"),
    ],
    "forkgym/WordProblems-v0": [
        ({}, "gold"),
        ({"steps": 5}, "gold"),
        ({"max_attempts": 3}, "feedback"),
    ],
    "forkgym/MathDataset-v0": [
        ({}, "gold"),
        ({"path": "math-sample"}, "gold"),
        ({"max_attempts": 3}, "feedback"),
    ],
    "forkgym/Calculator-v0": [
        ({}, "gold"),
        ({"tool_parser": "tags"}, "gold"),
        ({}, "tool_errors"),
    ],
    "forkgym/PythonTool-v0": [
        ({}, "gold"),
        ({"tool_parser": "tags"}, "gold"),
        ({}, "tool_errors"),
    ],
    "forkgym/Inventory-v0": [
        ({}, "gold"),
        ({"tool_parser": "tags"}, "gold"),
        ({"flaky_rate": 0.3}, "gold"),
        ({}, "tool_errors"),
    ],
}

# The corpus runs only the environments' own gold code (and tool calls that fail to parse,
# which run nothing), never a model's: building a tokenizer or a model needs no sandbox, so a
# machine without bubblewrap can still do it.
GOLD_RUN_KWARGS: dict[str, dict[str, Any]] = {
    "forkgym/PythonTool-v0": {"isolation": "unsafe-local"}
}


def _wrong_actions(env: Any, kind: str, seed: int) -> list[str]:
    if kind == "feedback":  # an incorrect answer, then one without a box
        return [f"The answer is $\\boxed{{{env.task.answer}1}}$.", "I am not sure."]
    if kind == "tool_errors":
        name = next(iter(env.tools))
        if env.parser.name == "hermes":
            broken = [
                f'<tool_call>\n{{"name": "{name}", "arguments": {{}}}}\n</tool_call>',
                '<tool_call>\n{"name": "search", "arguments": {}}\n</tool_call>',
                f'<tool_call>\n{{"name": "{name}", "arguments": \n</tool_call>',
            ]
        else:
            broken = [f"<{name}>{{1}}</{name}>", f"<{name}>"]
        return [broken[seed % len(broken)]]
    return []


# The environments whose text trains the default tokenizer: those registered when it was first
# built. An environment added later is left out, so that the default model's files stay
# byte-identical (the golden runs are recorded on them); its text still encodes exactly
# (byte-level BPE), only in more pieces.
CORPUS_ENVS = (
    "forkgym/Arithmetic-v0",
    "forkgym/WordProblems-v0",
    "forkgym/MathDataset-v0",
    "forkgym/Calculator-v0",
    "forkgym/PythonTool-v0",
    "forkgym/Inventory-v0",
)


def corpus_from_envs(seeds_per_env: int = 32) -> list[str]:
    """Texts of the environments in :data:`CORPUS_ENVS`, for :func:`build_tokenizer`.

    For each env and seed ``0 .. seeds_per_env - 1`` (cycling through a few configurations:
    curricula, division, both tool-call formats, flaky tools, retries), the env is reset and
    stepped with its gold actions to the end, after deliberately wrong turns in some
    configurations; the corpus gets the whole conversation rendered with the chat template
    (system prompt, prompt, tool calls, the tools' real results, feedback, final answer) and
    the plain-text rendering of the first observation. Grading runs in-process. Deterministic.
    """
    import gymnasium as gym

    import forkgym.envs  # noqa: F401 - registers the environments
    from forkgym.verifiers import MathVerifier

    if seeds_per_env < 1:
        raise ValueError("seeds_per_env must be >= 1")
    texts: list[str] = []
    with MathVerifier(workers=0, cache_size=0) as verifier:
        for env_id in CORPUS_ENVS:
            variants = _VARIANTS.get(env_id, [({}, "gold")])
            extra = GOLD_RUN_KWARGS.get(env_id, {})
            envs = [
                gym.make(env_id, verifier=verifier, **kwargs, **extra) for kwargs, _ in variants
            ]
            for seed in range(seeds_per_env):
                env, (_, kind) = envs[seed % len(variants)], variants[seed % len(variants)]
                obs, _ = env.reset(seed=seed)
                texts.append(obs["prompt"])
                done = False
                wrong = _wrong_actions(env, kind, seed)
                while not done:
                    action = wrong.pop(0) if wrong else env.gold_action()
                    obs, _, terminated, truncated, _ = env.step(action)
                    done = terminated or truncated
                texts.append(render_chatml(obs["messages"]))
            for env in envs:
                env.close()
    return texts
