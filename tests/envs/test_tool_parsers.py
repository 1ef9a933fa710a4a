import pytest
from hypothesis import given
from hypothesis import strategies as st

from forkgym.envs.tool_parsers import HermesParser, TagParser
from tests.timing import growth

TOOLS = {"calculator": ["expression"], "get_item": ["sku"], "move": ["src", "dst"]}


def test_hermes_reads_several_calls_with_spans():
    text = (
        'a <tool_call>{"name": "calculator", "arguments": {"expression": "1+1"}}</tool_call> b '
        + ('<tool_call>\n{"name": "get_item", "arguments": "{\\"sku\\": \\"X\\"}"}\n</tool_call>')
    )
    calls, problems = HermesParser().parse(text, TOOLS)
    assert not problems
    assert [(c.name, c.arguments) for c in calls] == [
        ("calculator", {"expression": "1+1"}),
        ("get_item", {"sku": "X"}),
    ]
    assert text[slice(*calls[0].span)].startswith("<tool_call>") and text[
        slice(*calls[0].span)
    ].endswith("</tool_call>")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("<tool_call>{oops}</tool_call>", "not valid JSON"),
        ('<tool_call>{"name": "x"', "unclosed"),
        ("<tool_call>[1, 2]</tool_call>", 'string "name"'),
        ('<tool_call>{"name": "x", "arguments": "nope"}</tool_call>', "not JSON"),
        ('<tool_call>{"name": "x", "arguments": 3}</tool_call>', "must be a JSON object"),
        ('{"name": "x"}</tool_call>', "without an opening"),
    ],
)
def test_hermes_problems_are_reported_not_raised(text, message):
    calls, problems = HermesParser().parse(text, TOOLS)
    assert not calls and len(problems) == 1 and message in problems[0].message


def test_plain_text_has_no_calls_or_problems():
    for parser in (HermesParser(), TagParser()):
        assert parser.parse("The answer is \\boxed{4}.", TOOLS) == ([], [])


def test_tag_parser_single_and_json_arguments():
    parser = TagParser()
    calls, problems = parser.parse(
        '<calculator>2*3</calculator><move>{"src": "a", "dst": "b"}</move>', TOOLS
    )
    assert not problems
    assert [(c.name, c.arguments) for c in calls] == [
        ("calculator", {"expression": "2*3"}),
        ("move", {"src": "a", "dst": "b"}),
    ]
    _, problems = parser.parse("<move>a to b</move>", TOOLS)
    assert "JSON object" in problems[0].message
    _, problems = parser.parse("<calculator>2*3", TOOLS)
    assert "unclosed <calculator>" in problems[0].message


def test_format_call_round_trips():
    for parser in (HermesParser(), TagParser()):
        text = parser.format_call("calculator", {"expression": "7*6"})
        calls, problems = parser.parse(text, TOOLS)
        assert not problems and calls[0].arguments == {"expression": "7*6"}


@given(st.text())
def test_parsers_never_raise(text):
    for parser in (HermesParser(), TagParser()):
        parser.parse(text, TOOLS)


def test_parsing_grows_linearly_on_pathological_input():
    """4x the input may cost at most 8x the time (quadratic would be 16x): growth, not an
    absolute time, so a busy machine cannot fail it."""
    for unit, n in (("<tool_call>", 5_000), ("<calculator>", 5_000), ("<calculator>1</calculator>", 1_250)):  # fmt: skip
        assert growth(parse_both, unit, n) < 8, unit


def parse_both(text: str) -> None:
    TagParser().parse(text, TOOLS)
    HermesParser().parse(text, TOOLS)
