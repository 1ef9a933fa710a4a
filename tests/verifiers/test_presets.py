"""Extraction presets, each on responses written in its dataset's or model family's style."""

import pytest

from forkgym.verifiers import MathVerifier, Status
from forkgym.verifiers.presets import PRESETS

OK, NO, BAD = Status.CORRECT, Status.INCORRECT, Status.INVALID

GSM8K_SOLUTION = (
    "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
    "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72"
)
MINERVA = (
    "We have $x^2 - 1 = 0$, so $x = \\pm 1$ and the product is $-1$.\n"
    "Final Answer: The final answer is $-1$. I hope it is correct."
)
MINERVA_WITH_BOXES = (
    "The interest after six months is $0.04 \\cdot 10,000 \\cdot \\frac{1}{2} = \\boxed{200}$. "
    "After the second CD it has grown by $\\boxed{255}$ more, for a total of $10,455.\n"
    "Final Answer: The final answer is $10,455$. I hope it is correct."
)
R1 = (
    "<think>\nLet me try. 2+2 could be \\boxed{5}? No, count again: 4.\n</think>\n\n"
    "The sum is $\\boxed{4}$."
)
R1_ZERO = "<think> 6 times 7 is 42 </think> <answer> 42 </answer>"

CASES = {
    "math": [
        (r"$-2,1$", r"By the Integer Root Theorem the roots are $\boxed{-2, 1}$.", OK),
        ("2-2p", r"Thus $x-p=\boxed{2-2p}$.", OK),
        (r"\frac{14}{3}", r"$=2+\frac{5}{3}+1=\boxed{\frac{14}{3}}$", OK),
        ("(2, 2), (6, 2)", r"$\boxed{(2, 2)} \quad \text{and} \quad \boxed{(6, 2)}$", OK),
        ("42", "The answer is 42.", BAD),  # MATH answers are boxed: nothing else is read
        ("42", r"First \boxed{41}. After checking every case again I get \boxed{42}", OK),
    ],
    "gsm8k": [
        ("72", GSM8K_SOLUTION, OK),
        ("70", GSM8K_SOLUTION, NO),
        ("1234", "So the total is 1,234 dollars.\n#### 1,234", OK),
        ("72", "She sold 24 in May, so 48 + 24 = 72. The answer is 72.", OK),
        ("72", r"48 + 24 = 72, so the answer is $\boxed{72}$", OK),
        ("72", "She sold 48 + 24 = 72 clips.", BAD),  # no final answer: not the last number
    ],
    "minerva": [
        ("-1", MINERVA, OK),
        ("1", MINERVA, NO),
        ("10455", MINERVA_WITH_BOXES, OK),  # the closing sentence, not the intermediate box
        (
            r"\frac{1}{2}",
            "Final Answer: The final answer is $\\frac{1}{2}$. I hope it is correct.",
            OK,
        ),
        ("28\\%", "Final Answer: The final answer is $28 \\%$. I hope it is correct.", OK),
        ("7", "Final Answer: The final answer is $\\boxed{7", BAD),  # cut off
    ],
    "r1": [
        ("4", R1, OK),
        ("5", R1, NO),  # a box inside the reasoning is not the answer
        ("42", R1_ZERO, OK),
        ("4", r"<answer>\boxed{4}</answer>", OK),
        ("4", "<think>2+2 is \\boxed{4}, I am sure", BAD),  # the reasoning never closed
        ("4", r"<think>fine</think> so \boxed{4", BAD),
    ],
    "lenient": [
        ("42", "I think it is 42", OK),
        ("42", "The result is **42**", OK),
        ("42", "so we get $42$", OK),
        ("42", "#### 42", OK),
        ("42", "<answer>42</answer>", OK),
        ("42", r"So the answer is \boxed{42", BAD),
    ],
    "mathverify": [
        ("9", "Answer $9$", OK),
        ("9", "Answer $8$", NO),
        ("42", r"so $\boxed{42}$", OK),
        ("42", r"It is 42, so the answer is $\boxed{4", BAD),
    ],
}


def test_every_preset_is_tested_and_documented():
    assert set(CASES) == set(PRESETS)
    for name, preset in PRESETS.items():
        assert preset.description and preset.example
        found = preset.extractor(name)(preset.example)
        assert found.answer, (name, preset.example)


@pytest.mark.parametrize(
    ("preset", "reference", "response", "status"),
    [(name, *case) for name, cases in CASES.items() for case in cases],
)
def test_a_preset_reads_its_style(preset, reference, response, status):
    with MathVerifier(workers=0, cache_size=0, preset=preset) as verifier:
        outcome = verifier.verify(reference, response)
    assert outcome.status is status, outcome


def test_preset_names_the_version_and_refuses_a_second_chain():
    with MathVerifier(workers=0, preset="r1") as verifier:
        assert ";extract=r1=think>answer_tag,boxed;" in verifier.version
    with pytest.raises(ValueError, match="unknown extraction preset 'gsm'"):
        MathVerifier(workers=0, preset="gsm")
    with pytest.raises(ValueError, match="not both"):
        MathVerifier(workers=0, preset="math", extract=["answer_is"])


def test_a_verifier_with_a_preset_pickles():
    import pickle

    with MathVerifier(workers=0, preset="gsm8k") as verifier:
        copy = pickle.loads(pickle.dumps(verifier))
    assert copy.version == verifier.version
    assert copy.verify("72", GSM8K_SOLUTION).status is OK
