"""A reference and a response that are the same string are never graded incorrect.

Whatever the text, when extraction finds an answer in it, grading it against itself must be
``correct``, or an infrastructure status (``timeout``/``error``: the text defeated the grader
or is no usable reference); never ``incorrect`` or ``invalid``. The reference and the response
are read by the same rules, so this catches any asymmetry between them (a list read one way
on one side, a plain-text number another way on the other, a box chain cut differently).
"""

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from forkgym.verifiers import MathVerifier, Status

WHOLE_TEXT = r"(?s).+"

TOKENS = [
    *"0123456789", "1,22", "1 000", "-", "+", ".", ",", ";", " ", "\n", "/", "=", "^", "x", "y",
    "(", ")", "[", "]", "{", "}", "$", "$$", "\\(", "\\)", "\\[", "\\]", "\\{", "\\}",
    "\\boxed{", "\\fbox{", "\\frac{1}{2}", "\\sqrt{2}", "\\pi", "\\%", "\\text{ cm}",
    " and ", " or ", "\\quad", "\\text{and}", "<answer>", "</answer>", "<think>", "</think>",
    "The answer is ", "#### ", "Final Answer: The final answer is ", ". I hope it is correct.",
]  # fmt: skip
texts = st.lists(st.sampled_from(TOKENS), min_size=1, max_size=24).map("".join)


@pytest.fixture(scope="module", params=["list", "parts", "last"])
def graders(request):
    verifiers = [
        MathVerifier(timeout=2.0, workers=1, cache_size=0, multi_box=request.param, extract=chain)
        for chain in (["boxed"], ["boxed", WHOLE_TEXT])
    ]
    for verifier in verifiers:
        verifier.start()
    yield verifiers
    for verifier in verifiers:
        verifier.close()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])  # fmt: skip
@given(text=texts)
def test_a_text_graded_against_itself_is_never_incorrect(graders, text):
    for verifier in graders:
        if verifier.extractor(text).answer is None:
            continue  # no answer in it: nothing to grade
        outcome = verifier.verify(text, text)
        event(f"graded: {outcome.status.value}")
        assert outcome.status in (Status.CORRECT, Status.TIMEOUT, Status.ERROR), (
            verifier.extractor.names,
            verifier.multi_box,
            outcome.status,
            outcome.extracted,
            outcome.details,
        )


@pytest.mark.parametrize(
    "text",
    [
        r"The solutions are $x = \boxed{-2,1}$.",
        "1,22",
        "1 000",
        "$1,22$",
        r"$\boxed{1}$ and $\boxed{2}$",
        r"\boxed{1} no no no no no \boxed{2}",
        r"So $\boxed{7}$. Final Answer: The final answer is 1,22. I hope it is correct.",
        r"$$\boxed{2}, \boxed{3}, \boxed{5}$$",
        r"(1) $\boxed{2}$ (2) $\boxed{\frac{1}{2}}$",
    ],
)
def test_examples_graded_against_themselves(graders, text):
    for verifier in graders:
        if verifier.extractor(text).answer is not None:
            assert verifier.verify(text, text).status is Status.CORRECT, (verifier.extractor.names, text)  # fmt: skip
