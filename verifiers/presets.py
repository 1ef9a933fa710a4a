"""Named extraction presets: which strategies find the final answer in a dataset's or a model
family's responses.

A preset is a chain of :data:`~forkgym.verifiers.extract.EXTRACTORS` strategies, tried in
order (the first non-empty answer wins), and whether reasoning in ``<think>...</think>`` is
skipped. ``MathVerifier(preset="gsm8k")`` or ``forkgym verify --preset gsm8k`` selects one;
``forkgym verify --explain`` shows what each strategy of a chain found in one response.
Whatever the preset, a response whose last box or ``<answer>`` is cut off has no answer.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from forkgym.registry import Registry

from .extract import AnswerExtractor

__all__ = ["PRESETS", "Preset", "extractor_for"]


@dataclass(frozen=True)
class Preset:
    """A named chain of extraction strategies, with what it is for and an example of it."""

    strategies: tuple[str, ...]
    after_think: bool
    description: str
    example: str

    def extractor(self, name: str, *, chain_boxes: bool = True) -> AnswerExtractor:
        return AnswerExtractor(
            self.strategies, chain_boxes=chain_boxes, after_think=self.after_think, preset=name
        )


PRESETS: Registry[Preset] = Registry("extraction preset")
PRESETS.register(
    "math",
    Preset(
        ("boxed",),
        False,
        "MATH, NuminaMath and OpenThoughts solutions; Qwen-Math and most instruct models asked "
        "to box the answer: the last \\boxed{} (with the boxes chained to it)",
        "... so the roots are $\\boxed{-2, 1}$.",
    ),
)
PRESETS.register(
    "gsm8k",
    Preset(
        ("gsm8k", "boxed", "answer_is"),
        False,
        "GSM8K solutions (#### 72) and few-shot chains of thought ending 'The answer is 72.'; "
        "a boxed answer when the model boxes instead",
        "Natalia sold 48 + 24 = 72 clips.\n#### 72",
    ),
)
PRESETS.register(
    "minerva",
    Preset(
        ("minerva", "boxed", "answer_is"),
        False,
        "Minerva-style MATH prompting (lm-evaluation-harness minerva_math): 'Final Answer: "
        "The final answer is $X$. I hope it is correct.'",
        "... Final Answer: The final answer is $\\frac{1}{2}$. I hope it is correct.",
    ),
)
PRESETS.register(
    "r1",
    Preset(
        ("answer_tag", "boxed"),
        True,
        "DeepSeek-R1 and R1-Zero style reasoning models: only the text after </think> counts "
        "(a <think> never closed is no answer); <answer>...</answer> or the last \\boxed{}",
        "<think>2+2 is 4, or maybe \\boxed{5}?</think> The answer is $\\boxed{4}$.",
    ),
)
PRESETS.register(
    "lenient",
    Preset(
        ("boxed", "answer_tag", "gsm8k", "answer_is", "last_number"),
        False,
        "evaluation of responses in unknown formats: every strategy, the last number last. "
        "Not for training: a policy learns to end with a number",
        "I think it is 42",
    ),
)

PRESETS.register(
    "mathverify",
    Preset(
        ("boxed", "prose"),
        False,
        "answers in prose, read as math-verify reads them, for users moving from it: the last "
        "\\boxed{}, else math-verify's own extraction over the whole response ('Answer $9$'), "
        "less inline math that crosses a line (its LaTeX reading refuses it). forkgym's guards "
        "stay: a cut-off box is no answer, exact numbers are compared exactly",
        "The solution is $x \\neq 5$",
    ),
)


def extractor_for(
    extract: Iterable[str], preset: str | None, *, chain_boxes: bool = True
) -> AnswerExtractor:
    """The extractor for ``MathVerifier(extract=..., preset=...)``: a preset by name, or the
    strategies given (a preset replaces the default ``("boxed",)``, not a chain given too)."""
    strategies = tuple(extract)
    if preset is None:
        return AnswerExtractor(strategies, chain_boxes=chain_boxes)
    if preset not in PRESETS:
        raise ValueError(
            f"unknown extraction preset {preset!r}; presets: {', '.join(sorted(PRESETS))}"
        )
    if strategies != ("boxed",):
        raise ValueError(f"give either preset={preset!r} or extract={list(strategies)!r}, not both")
    return PRESETS[preset].extractor(preset, chain_boxes=chain_boxes)
