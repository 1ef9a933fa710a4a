"""Multi-part answers: a reference with several boxes is graded part by part (multi_box)."""

import pytest

from forkgym.verifiers import MathVerifier, Status
from forkgym.verifiers.extract import boxed_spans, split_top_level
from forkgym.verifiers.math_verifier import reference_parts

REF = r"(1) The minimum is $\boxed{2}$. (2) The ratio is $\boxed{\frac{1}{2}}$."


@pytest.fixture(scope="module")
def verifier():
    with MathVerifier(timeout=2.0, workers=1, cache_size=0) as v:
        yield v


def test_boxes_and_top_level_split():
    text = r"a \boxed{2} \boxedx \fbox{x^{2}} \boxed {\frac{1}{2}} \boxed{ cut \boxed{3}"
    assert [text[a:b] for a, b in boxed_spans(text)] == ["2", "x^{2}", r"\frac{1}{2}"]
    assert split_top_level(r"2, (1, 3); \frac{1,2}{3}") == ["2", "(1, 3)", r"\frac{1,2}{3}"]
    assert reference_parts(REF) == ["2", r"\frac{1}{2}"]
    assert reference_parts(r"\boxed{5}") is None and reference_parts("5") is None


@pytest.mark.parametrize(
    ("response", "status"),
    [
        (r"So $\boxed{2}$ and $\boxed{0.5}$.", Status.CORRECT),
        (r"Scratch: \boxed{7}. Final: \boxed{2}, \boxed{2/4}", Status.CORRECT),  # the last two
        (r"\boxed{2, 1/2}", Status.CORRECT),  # one box holding both parts
        (r"\boxed{2; \frac{1}{2}}", Status.CORRECT),
        (r"\boxed{1/2} \boxed{2}", Status.INCORRECT),  # parts are ordered
        (r"\boxed{2} \boxed{3}", Status.INCORRECT),  # one part wrong
        (r"The ratio is $\boxed{\frac{1}{2}}$.", Status.INCORRECT),  # only the last part
        ("I cannot tell.", Status.INVALID),
    ],
)
def test_parts_are_graded_together(verifier, response, status):
    assert verifier.verify(REF, response).status is status


def test_answering_only_the_last_part_is_not_paid(verifier):
    """What `last` would pay and `parts` does not: the reward hack multi-box grading closes."""
    last_only = r"The ratio is $\boxed{\frac{1}{2}}$."
    outcome = verifier.verify(REF, last_only)
    assert outcome.status is Status.INCORRECT
    assert outcome.details["reason"] == "parts_missing"
    with MathVerifier(workers=0, multi_box="last") as last:
        assert last.verify(REF, last_only).status is Status.CORRECT
        assert "multi_box=last" in last.version and "multi_box=parts" in verifier.version
    with pytest.raises(ValueError, match="multi_box"):
        MathVerifier(workers=0, multi_box="all")


def test_a_part_that_times_out_leaves_the_whole_undecided(verifier):
    both = verifier.verify(REF, r"\boxed{2} \boxed{9^{9^{9^{9}}}}")
    assert both.status is Status.TIMEOUT and both.reward is None
    assert both.details["parts"] == ["correct", "timeout"]
    # a part known to be wrong decides the answer whatever the other part did
    wrong = verifier.verify(REF, r"\boxed{3} \boxed{9^{9^{9^{9}}}}")
    assert wrong.status is Status.INCORRECT


def test_batch_quick_and_details(verifier):
    right = r"\boxed{2} \boxed{1/2}"
    outcomes = verifier.verify_many([(REF, right), ("3", r"\boxed{3}"), (REF, r"\boxed{2}")])
    assert [o.status for o in outcomes] == [Status.CORRECT, Status.CORRECT, Status.INCORRECT]
    assert outcomes[0].extracted == "2, 1/2"
    assert outcomes[0].details["strategy"] == "boxed_parts"
    assert outcomes[0].details["span"] == [7, 20]
    quick = verifier.verify_quick(REF, right)  # both parts are plain numbers: fast path
    assert quick is not None and quick.status is Status.CORRECT
    assert verifier.verify_quick(REF, r"\boxed{2} \boxed{\sqrt{x}}") is None  # needs sympy


def test_dataset_rows_with_several_boxes_become_multi_part_tasks(tmp_path):
    import json

    import gymnasium as gym

    import forkgym.envs  # noqa: F401 - registers the environments

    path = tmp_path / "parts.jsonl"
    row = {"problem": "Find a and b.", "solution": r"So $a = \boxed{3}$ and $b = \boxed{-1}$."}
    path.write_text(json.dumps(row) + "\n")
    env = gym.make("forkgym/MathDataset-v0", path=str(path))
    env.reset(seed=0)
    assert reference_parts(env.unwrapped.task.answer) == ["3", "-1"]
    assert env.step(r"$\boxed{-1}$")[4]["status"] == "incorrect"
    env.reset(seed=0)
    assert env.step(env.unwrapped.gold_action())[4]["status"] == "correct"
    env.reset(seed=0)
    assert env.step(r"$\boxed{3, -1}$")[4]["status"] == "correct"
