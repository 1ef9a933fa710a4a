import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forkgym.verifiers import AnswerExtractor, register_extractor
from forkgym.verifiers.extract import EXTRACTORS, last_boxed, strip_math_delimiters
from tests.timing import growth


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"\boxed{42}", "42"),
        (r"so $\boxed{\frac{1}{2}}$.", r"\frac{1}{2}"),
        (r"\boxed{1} then \boxed{2}", "2"),
        (r"\boxed{\{1, 2\}}", r"\{1, 2\}"),  # escaped braces do not close the box
        (r"\boxed {7}", "7"),
        (r"$\boxed 3$", "3"),
        (r"\fbox{5}", "5"),
        (r"\boxed{a} and \fbox{b}", "b"),
        (r"\boxed{x} \boxedtext", "x"),  # \boxedtext is another command
        (r"\boxed{}", ""),
        ("no box here", None),
        (r"cut off \boxed{12", None),  # the last box is broken: no answer, not an older box
        (r"\boxed{1} then \boxed{2", None),
        ("\\boxed", None),
    ],
)
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected


@given(
    prefix=st.text(alphabet=st.characters(blacklist_characters="\\")),
    body=st.text(alphabet=st.characters(blacklist_characters="\\{}")),
)
def test_last_boxed_finds_any_plain_body(prefix, body):
    assert last_boxed(prefix + r"\boxed{" + body + "}") == body


@given(st.text())
def test_extraction_never_raises(text):
    result = AnswerExtractor(["boxed", "gsm8k", "answer_tag", "answer_is", "last_number"])(text)
    assert result.answer is None or result.answer.strip() == result.answer


def test_extraction_is_linear_on_long_responses():
    text = ("blah { " * 50_000) + r"\boxed{7}"
    assert AnswerExtractor()(text).answer == "7"


def test_strategies_and_reasons():
    extract = AnswerExtractor(["answer_tag", "gsm8k", "boxed"])
    assert extract("<answer>5</answer> and \\boxed{6}").answer == "5"
    found = extract("steps\n#### 1,234")
    assert (found.answer, found.strategy) == ("1,234", "gsm8k")
    assert AnswerExtractor(["answer_is"])("Thus the answer is $12$.").answer == "12"
    assert AnswerExtractor(["last_number"])("3 apples and 4.5 pears").answer == "4.5"
    assert AnswerExtractor()("nothing").reason == "no_answer"
    assert AnswerExtractor()(r"\boxed{ }").reason == "empty_answer"
    assert AnswerExtractor()(r"\boxed{$ $}").reason == "empty_answer"


def test_custom_regex_and_registry():
    extract = AnswerExtractor([r"ANSWER:\s*(\S+)"])
    assert extract("ANSWER: 1 ... ANSWER: 2").answer == "2"
    assert AnswerExtractor([re.compile(r"=\s*(\d+)$")])("x = 41").answer == "41"
    with pytest.raises(ValueError, match="neither a registered extractor"):
        AnswerExtractor(["(unclosed"])
    with pytest.raises(ValueError):
        AnswerExtractor([])
    register_extractor("_test_first_word", lambda text: text.split()[0] if text.split() else None)
    try:
        assert AnswerExtractor(["_test_first_word"])("hello world").answer == "hello"
        with pytest.raises(ValueError, match="already registered"):
            register_extractor("_test_first_word", lambda text: None)
    finally:
        del EXTRACTORS["_test_first_word"]


def test_strip_math_delimiters():
    assert strip_math_delimiters("  $5$ ") == "5"
    assert strip_math_delimiters(r"\(x\)") == "x"
    assert strip_math_delimiters("$$1$$") == "1"
    assert strip_math_delimiters("$") == "$"


def test_spans_point_at_the_graded_text():
    text = r"first \boxed{1}. Then I checked it twice: $\boxed{\frac{1}{2}}$. So 1/2."
    found = AnswerExtractor()(text)
    start, end = found.span
    assert text[start:end] == r"\frac{1}{2}" and found.answer == r"\frac{1}{2}"
    text = r"so $\boxed{1}$ and $\boxed{2}$."  # a list: the span covers its boxes
    found = AnswerExtractor()(text)
    assert (found.answer, found.items) == ("1,2", ("1", "2"))
    assert text[slice(*found.span)] == r"1}$ and $\boxed{2"
    found = AnswerExtractor(["answer_is"])("so the answer is 42.")
    assert "so the answer is 42."[slice(*found.span)] == "42"
    register_extractor("_test_upper", lambda text: text.upper() if text else None)
    try:
        found = AnswerExtractor(["_test_upper"])("abc")
        assert found.answer == "ABC" and found.span is None  # not a substring: no span
    finally:
        del EXTRACTORS["_test_upper"]


def test_every_strategy_is_linear_on_hostile_text():
    hostile = [
        ("<answer>", 10_000), ("answer is ", 5_000), ("#### ", 10_000), ("1,", 25_000),
        ("\\boxed{", 10_000), ("\\boxed{1}, ", 5_000), ("$\\boxed{1}$ and ", 5_000),
        ("\\[\\boxed{1} ", 5_000), ("$$\\boxed{1}", 5_000), ("$", 25_000), ("I hope ", 10_000),
        ("Final Answer: The final answer is $1$. I hope ", 2_000), ("<think>", 10_000),
    ]  # fmt: skip
    extract = AnswerExtractor(["boxed", "gsm8k", "answer_tag", "answer_is", "minerva", "last_number"])  # fmt: skip
    for unit, n in hostile:  # 4x the input, at most 8x the time (quadratic would be 16x)
        assert growth(extract, unit, n) < 8, unit
        assert growth(extract, unit + "\\boxed{2}", n // 2) < 8, unit  # with a final box
    r1 = AnswerExtractor(["answer_tag", "boxed"], after_think=True)
    for unit in ("<think>", "</think>", "<think> \\boxed{1} </think> "):
        assert growth(r1, unit, 5_000) < 8, unit


# -- answers as real models write them (each a reproducer from the integrations issue) -------


@pytest.mark.parametrize(
    ("strategy", "text", "answer"),
    [
        ("answer_is", "The final answer is 42. I hope it is correct.", "42"),
        ("answer_is", "So the answer is **42**.", "42"),
        ("answer_is", "The answer is 42 (6 x 7).", "42"),
        ("answer_is", "Therefore the answer is 3.14.", "3.14"),
        ("answer_is", "The answer is (1, 2).", "(1, 2)"),
        ("answer_is", "answer is: f(x) = 2x", "f(x) = 2x"),
        ("answer_tag", "<answer>The answer is 42</answer>", "42"),
        ("answer_tag", r"<answer>so $\boxed{7}$</answer>", "7"),
        ("answer_tag", "<answer> 42 </answer>", "42"),
        ("last_number", r"so x = \frac{1}{2}", r"\frac{1}{2}"),
        ("last_number", r"so x = -\dfrac{3}{4}.", r"-\dfrac{3}{4}"),
        ("last_number", r"\frac{1}{2} + 7", "7"),
        ("last_number", "it is 3/4", "3/4"),
        ("last_number", "1,234 dollars", "1,234"),
    ],
)
def test_opt_in_strategies_read_real_model_phrasing(strategy, text, answer):
    found = AnswerExtractor([strategy])(text)
    assert found.answer == answer
    assert text[slice(*found.span)] == answer  # the span points at what is graded


def test_a_misspelt_strategy_is_refused_with_the_closest_name():
    with pytest.raises(ValueError, match="unknown extractor 'boxd'; did you mean 'boxed'"):
        AnswerExtractor(["boxd"])
    assert AnswerExtractor(["(boxd)"])("a boxd b").answer == "boxd"  # a regex, on purpose


def test_the_opt_in_strategies_grade_real_phrasing_correct():
    from forkgym.verifiers import MathVerifier, Status

    with MathVerifier(extract=["answer_is"], workers=1) as v:
        assert v.verify("42", "The final answer is 42. I hope it is correct.").status is Status.CORRECT  # fmt: skip
    with MathVerifier(extract=["last_number"], workers=1) as v:
        assert v.verify("0.5", r"so x = \frac{1}{2}").status is Status.CORRECT
