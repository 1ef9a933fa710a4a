"""Every misgrade reported in issue 27 ("The grader agrees with math-verify on its own test
suite, and pays nothing it should not"), with the outcome it now has.

The expected outcomes are math-verify 0.9's verdicts on the same texts (its own test suite
holds most of these rows); where forkgym deliberately differs, the test says why.
"""

import pytest

from forkgym.verifiers import MathVerifier, Status
from forkgym.verifiers.extract import AnswerExtractor
from forkgym.verifiers.presets import PRESETS

WHOLE_TEXT = r"(?s).+"  # the documented whole-text fallback the suite's bare answers need


@pytest.fixture(scope="module")
def whole_text():
    with MathVerifier(timeout=3.0, workers=1, cache_size=0, extract=["boxed", WHOLE_TEXT]) as v:
        yield v


# -- 1. two integers joined by a comma are a list, not a decimal --------------------------------

SOLUTION = r"The solutions are $x = \boxed{-2,1}$."


@pytest.mark.parametrize(
    ("reference", "response"),
    [
        ("$-2,1$", r"\boxed{-2.1}"),
        (SOLUTION, r"\boxed{-2.1}"),
        (r"\boxed{3,4}", r"\boxed{3.4}"),
        ("$1,5$", r"\boxed{1.5}"),
        ("$12,5$", r"\boxed{12.5}"),
    ],
)
def test_a_comma_list_in_math_is_never_paid_as_a_decimal(one_worker, reference, response):
    assert one_worker.verify(reference, response).status is Status.INCORRECT


@pytest.mark.parametrize("response", [r"\boxed{-2,1}", r"\boxed{1,-2}", SOLUTION, "$x = 1, -2$"])
def test_the_solutions_are_paid_in_any_order(one_worker, whole_text, response):
    grader = whole_text if "boxed" not in response else one_worker
    assert grader.verify(SOLUTION, response).status is Status.CORRECT


def test_a_plain_text_reference_keeps_its_decimal_comma(one_worker):
    """Outside math, ``12,5`` is the decimal 12.5 (math-verify reads plain text so); inside
    ``$...$`` or a box it is the list 12, 5."""
    assert one_worker.verify("12,5", r"\boxed{12.5}").status is Status.CORRECT
    assert one_worker.verify("12,5", r"\boxed{12, 5}").status is Status.INCORRECT
    assert one_worker.verify("$12,5$", r"\boxed{12, 5}").status is Status.CORRECT


def test_a_dataset_answer_that_is_a_list_of_solutions_stays_a_list(tmp_path):
    import json

    import gymnasium as gym

    import forkgym.envs  # noqa: F401 - registers the environments

    path = tmp_path / "roots.jsonl"
    rows = [
        {"problem": "Find the integer roots.", "solution": SOLUTION},
        {"problem": "Find the integer roots.", "answer": "-2,1"},
        {"question": "How many?", "answer": "Sold 1,234.\n#### 1,234"},
    ]
    path.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    env = gym.make("forkgym/MathDataset-v0", path=str(path))
    for seed in (0, 1):
        env.reset(options={"task_id": f"roots:{seed + 1}"})
        assert env.unwrapped.task.answer == "$-2,1$"
        assert env.step(r"$\boxed{1, -2}$")[4]["status"] == "correct"
        env.reset(options={"task_id": f"roots:{seed + 1}"})
        assert env.step(r"$\boxed{-2.1}$")[4]["status"] == "incorrect"
    env.reset(options={"task_id": "roots:3"})
    assert env.unwrapped.task.answer == "1,234"  # a thousands separator is left alone
    assert env.step(r"$\boxed{1234}$")[4]["status"] == "correct"


# -- 2. several boxes in the response, one answer in the reference ---------------------------


@pytest.mark.parametrize("reference", ["(2, 2), (6, 2)", "$$(2, 2), (6, 2)$$"])
def test_several_boxes_are_graded_together(one_worker, reference):
    response = r"$$\boxed{(2, 2)} \quad\text{and}\quad \boxed{(6, 2)}$$"
    outcome = one_worker.verify(reference, response)
    assert outcome.status is Status.CORRECT
    assert outcome.extracted == "(2, 2),(6, 2)"
    assert one_worker.verify(reference, r"\boxed{(6, 2)}").status is Status.INCORRECT


# -- 3. several boxes in the reference -----------------------------------------------------

GOLD_004 = (
    "the answer should be \\boxed{004}.\n\nBut let me check again: the sum is 2,552,004. The"
    " last three digits are 004, so \\boxed{004} is the correct answer.\n\n**Final Answer**\n"
    "\\boxed{004}"
)


@pytest.mark.parametrize("multi_box", ["list", "parts"])
def test_the_same_answer_boxed_again_is_one_answer(multi_box):
    with MathVerifier(workers=0, cache_size=0, multi_box=multi_box) as v:
        assert v.verify(GOLD_004, r"\boxed{4}").status is Status.CORRECT


def test_a_list_reference_in_boxes_takes_its_answers_in_any_order(one_worker, whole_text):
    assert one_worker.verify(r"\(\boxed{1}\) and \(\boxed{-2}\).", r"$\boxed{-2,1}$.").status is Status.CORRECT  # fmt: skip
    primes = r"$$\boxed{2}, \boxed{3}, \boxed{5}, \boxed{7}, \boxed{13}$$"
    assert whole_text.verify(primes, "$${2, 3, 5, 7, 13}$$").status is Status.CORRECT
    assert one_worker.verify(primes, r"\boxed{\{13, 7, 5, 3, 2\}}").status is Status.CORRECT
    assert one_worker.verify(primes, r"\boxed{\{2, 3, 5, 7\}}").status is Status.INCORRECT


def test_an_earlier_box_far_from_the_last_is_not_part_of_the_reference(one_worker):
    gold = r"\boxed{1} no no no no no \boxed{2}"
    assert one_worker.verify(gold, r"$\boxed{1,2}$").status is Status.INCORRECT
    assert one_worker.verify(gold, r"$\boxed{2}$").status is Status.CORRECT
    joined = r"\boxed{1} papers and \boxed{2} bins"
    assert one_worker.verify(joined, r"$\boxed{1,2}$").status is Status.CORRECT


def test_strict_parts_still_grade_in_order_and_open_a_braced_set():
    """multi_box="parts" is the strict part-by-part grading some datasets want: the order of
    the reference's boxes is the order of the answer's parts."""
    primes = r"$$\boxed{2}, \boxed{3}, \boxed{5}, \boxed{7}, \boxed{13}$$"
    with MathVerifier(workers=0, cache_size=0, multi_box="parts", extract=["boxed", WHOLE_TEXT]) as v:  # fmt: skip
        assert v.verify(primes, "$${2, 3, 5, 7, 13}$$").status is Status.CORRECT
        assert v.verify(primes, r"\boxed{\{2, 3, 5, 7, 13\}}").status is Status.CORRECT
        assert v.verify(r"\(\boxed{1}\) and \(\boxed{-2}\).", r"$\boxed{-2,1}$.").status is Status.INCORRECT  # fmt: skip
        assert v.verify(r"\(\boxed{1}\) and \(\boxed{-2}\).", r"$\boxed{1,-2}$.").status is Status.CORRECT  # fmt: skip


# -- 4. a truncated box is never paid, whatever the extractor chain ---------------------------

TRUNCATED = [
    r"So the answer is \boxed{42",
    r"So the answer is \boxed{42} or rather \boxed{4",
    r"We get \boxed{42} at first. After more steps the answer is \boxed{",
    "So the answer is \\boxed",
    r"The answer is 42. <answer>\boxed{42}",
    "<answer>42",
]
CHAINS = [
    ["answer_is"],
    ["last_number"],
    ["gsm8k", "answer_is", "last_number"],
    ["boxed", WHOLE_TEXT],
    ["answer_tag", "boxed", "answer_is", "last_number"],
    [r"(\d+)"],
]


@pytest.mark.parametrize("response", TRUNCATED)
@pytest.mark.parametrize("chain", CHAINS + [f"preset:{name}" for name in PRESETS])
def test_a_cut_off_answer_is_never_paid(response, chain):
    if isinstance(chain, str):
        v = MathVerifier(workers=0, cache_size=0, preset=chain.split(":")[1])
    else:
        v = MathVerifier(workers=0, cache_size=0, extract=chain)
    with v:
        outcome = v.verify("42", response)
    assert outcome.status is Status.INVALID, (chain, outcome)
    assert outcome.details["reason"] == "unclosed_answer"


def test_a_closed_answer_after_a_cut_off_box_inside_think_is_graded():
    r1 = AnswerExtractor(["answer_tag", "boxed"], after_think=True)
    assert r1(r"<think>maybe \boxed{4 ... no</think> <answer>42</answer>").answer == "42"
    assert r1(r"<think>it is \boxed{42} surely").reason == "unclosed_think"


# -- 5. plain-text numbers, and a reference's unclosed box ------------------------------------


@pytest.mark.parametrize(
    ("reference", "response"), [("1000", "1 000"), ("1000.99", "1000,99"), ("1,22", "1.22")]
)
def test_numbers_written_as_plain_text_read_as_plain_text(whole_text, reference, response):
    assert whole_text.verify(reference, response).status is Status.CORRECT


def test_plain_text_readings_stay_out_of_math(whole_text):
    assert whole_text.verify("1000.99", "$1000,99$").status is Status.INCORRECT  # the list
    assert whole_text.verify("1000", "10 000").status is Status.INCORRECT


def test_a_reference_whose_box_never_closes_is_graded_on_its_content(one_worker):
    outcome = one_worker.verify(r"So the answer is \boxed{42", r"\boxed{42}")
    assert outcome.status is Status.CORRECT
    assert outcome.details["reference_note"] == "unclosed_box"
    assert one_worker.verify(r"So the answer is \boxed{42", r"\boxed{41}").status is Status.INCORRECT  # fmt: skip
    assert one_worker.verify(r"So the answer is \boxed", r"\boxed{41}").status is Status.ERROR
