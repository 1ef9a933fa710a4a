"""Several boxes: list answers (the default, as math-verify compares one_worker), strict parts, last."""

import pytest

from forkgym.verifiers import MathVerifier, Status
from forkgym.verifiers.extract import boxed_spans, split_top_level
from forkgym.verifiers.math_verifier import reference_answer, reference_parts, split_parts

REF = r"(1) The minimum is $\boxed{2}$. (2) The ratio is $\boxed{\frac{1}{2}}$."


@pytest.fixture(scope="module")
def parts():
    with MathVerifier(timeout=2.0, workers=1, cache_size=0, multi_box="parts") as v:
        yield v


def test_boxes_and_top_level_split():
    text = r"a \boxed{2} \boxedx \fbox{x^{2}} \boxed {\frac{1}{2}} \boxed{ cut \boxed{3}"
    assert [text[a:b] for a, b in boxed_spans(text)] == ["2", "x^{2}", r"\frac{1}{2}"]
    assert split_top_level(r"2, (1, 3); \frac{1,2}{3}") == ["2", "(1, 3)", r"\frac{1,2}{3}"]
    assert split_parts("{2, 3, 5}") == split_parts(r"\{2, 3, 5\}") == ["2", "3", "5"]
    assert split_parts(r"\left\{1; 2\right\}") == ["1", "2"]
    assert split_parts("{1}, {2}") == ["{1}", "{2}"]  # two groups, not one set's braces
    assert reference_parts(REF) == ["2", r"\frac{1}{2}"]
    assert reference_parts(r"\boxed{5}") is None and reference_parts("5") is None
    assert reference_parts(r"\boxed{004} so \boxed{004}") is None  # one answer boxed twice


# -- list answers (multi_box="list", the default) --------------------------------------------


@pytest.mark.parametrize(
    ("reference", "response", "status"),
    [
        # a list is a set: order and repeats do not matter
        (r"\boxed{1, 2}", r"\boxed{2, 1}", Status.CORRECT),
        (r"\boxed{1, 2}", r"\boxed{1, 2, 2}", Status.CORRECT),
        (r"\boxed{1, 2}", r"\boxed{2}, \boxed{1}", Status.CORRECT),  # boxes joined by a comma
        (r"\boxed{1, 2}", r"\boxed{1} and \boxed{2}", Status.CORRECT),
        (r"$1$ and $2$", r"\boxed{2, 1}", Status.CORRECT),  # math spans joined by "and"
        (r"\boxed{1, 2}", r"\boxed{1}", Status.INCORRECT),  # a part missing
        (r"\boxed{1, 2}", r"\boxed{1, 2, 3}", Status.INCORRECT),  # one too many
        ("2", r"\boxed{1}, \boxed{2}", Status.INCORRECT),  # a hedge is a list, not the answer
        # a tuple keeps its order
        (r"\boxed{(1, 2)}", r"\boxed{(2, 1)}", Status.INCORRECT),
        (
            r"\boxed{(1, 2), (3, 4)}",
            r"\boxed{(3, 4)} \quad\text{and}\quad \boxed{(1, 2)}",
            Status.CORRECT,
        ),
        # the same answer boxed twice is that answer
        ("4", r"\boxed{4}. Checking: \boxed{4}", Status.CORRECT),
        # boxes far apart with no joining word: the last one is the answer
        ("2", r"\boxed{1} was wrong as the second case shows. So \boxed{2}", Status.CORRECT),
    ],
)
def test_lists_compare_as_math_verify_compares_them(one_worker, reference, response, status):
    assert one_worker.verify(reference, response).status is status


def test_a_list_reference_reads_like_a_list_response():
    assert reference_answer(r"$\boxed{1}$, $\boxed{2}$") == "1,2"
    assert reference_answer(r"$1$ and $2$ or $3$") == "1,2,3"
    assert reference_answer(r"\boxed{1} no no no no no \boxed{2}") == "2"
    assert reference_answer(r"\boxed{1} papers and \boxed{2} bins") == "1,2"


def test_a_multi_part_solution_without_joining_words_is_its_last_box(one_worker, parts):
    """Under list grading the reference's final answer is its last chain of boxes, as for any
    response; a dataset that wants each box graded as a part asks for multi_box="parts"."""
    assert one_worker.verify(REF, r"\boxed{\frac{1}{2}}").status is Status.CORRECT
    outcome = parts.verify(REF, r"The ratio is $\boxed{\frac{1}{2}}$.")
    assert outcome.status is Status.INCORRECT and outcome.details["reason"] == "parts_missing"


# -- strict parts (multi_box="parts") ---------------------------------------------------------


@pytest.mark.parametrize(
    ("response", "status"),
    [
        (r"So $\boxed{2}$ and $\boxed{0.5}$.", Status.CORRECT),
        (r"Scratch: \boxed{7}. Final: \boxed{2}, \boxed{2/4}", Status.CORRECT),  # the last two
        (r"\boxed{2, 1/2}", Status.CORRECT),  # one box holding both parts
        (r"\boxed{2; \frac{1}{2}}", Status.CORRECT),
        (r"\boxed{\{2, \frac{1}{2}\}}", Status.CORRECT),  # a set's braces are opened
        (r"\boxed{2} so \boxed{2} and \boxed{1/2}", Status.CORRECT),  # a repeated box is one
        (r"\boxed{1/2} \boxed{2}", Status.INCORRECT),  # parts are ordered
        (r"\boxed{2} \boxed{3}", Status.INCORRECT),  # one part wrong
        (r"The ratio is $\boxed{\frac{1}{2}}$.", Status.INCORRECT),  # only the last part
        ("I cannot tell.", Status.INVALID),
        (r"\boxed{2} and \boxed{1/", Status.INVALID),  # the last box is cut off
    ],
)
def test_parts_are_graded_together(parts, response, status):
    assert parts.verify(REF, response).status is status


def test_answering_only_the_last_part_is_not_paid_under_parts(parts):
    last_only = r"The ratio is $\boxed{\frac{1}{2}}$."
    outcome = parts.verify(REF, last_only)
    assert outcome.status is Status.INCORRECT
    assert outcome.details["reason"] == "parts_missing"
    assert "multi_box=parts" in parts.version
    with pytest.raises(ValueError, match="multi_box"):
        MathVerifier(workers=0, multi_box="all")


def test_last_grades_one_box_on_each_side():
    with MathVerifier(workers=0, multi_box="last") as last:
        assert last.verify(REF, r"$\boxed{\frac{1}{2}}$").status is Status.CORRECT
        assert last.verify("2", r"\boxed{1}, \boxed{2}").status is Status.CORRECT
        assert last.verify(r"\boxed{1}, \boxed{2}", r"\boxed{2}").status is Status.CORRECT
        assert "multi_box=last" in last.version


def test_a_part_that_times_out_leaves_the_whole_undecided(parts):
    both = parts.verify(REF, r"\boxed{2} \boxed{9^{9^{9^{9}}}}")
    assert both.status is Status.TIMEOUT and both.reward is None
    assert both.details["parts"] == ["correct", "timeout"]
    # a part known to be wrong decides the answer whatever the other part did
    wrong = parts.verify(REF, r"\boxed{3} \boxed{9^{9^{9^{9}}}}")
    assert wrong.status is Status.INCORRECT


def test_batch_quick_and_details(parts):
    right = r"\boxed{2} \boxed{1/2}"
    outcomes = parts.verify_many([(REF, right), ("3", r"\boxed{3}"), (REF, r"\boxed{2}")])
    assert [o.status for o in outcomes] == [Status.CORRECT, Status.CORRECT, Status.INCORRECT]
    assert outcomes[0].extracted == "2, 1/2"
    assert outcomes[0].details["strategy"] == "boxed_parts"
    assert outcomes[0].details["span"] == [7, 20]
    quick = parts.verify_quick(REF, right)  # both parts are plain numbers: fast path
    assert quick is not None and quick.status is Status.CORRECT
    assert parts.verify_quick(REF, r"\boxed{2} \boxed{\sqrt{x}}") is None  # needs sympy


def test_dataset_rows_with_several_boxes_become_list_tasks(tmp_path):
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


def test_the_documented_list_rule_holds(one_worker):
    """Every row of the list-answer table in docs/verifier.md grades as the table says."""
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "verifier.md").read_text()
    section = doc.split("### List answers", 1)[1].split("\n### ", 1)[0]
    rows = re.findall(r"^\| `(.+?)` \| `(.+?)` \| (correct|incorrect)\b", section, re.MULTILINE)
    assert len(rows) >= 8
    for reference, response, verdict in rows:
        got = one_worker.verify(reference, response).status.value
        assert got == verdict, (reference, response, got)
