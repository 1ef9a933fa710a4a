"""The Python examples of docs/integrations.md run as written, their commented results hold."""

import ast
import re
from pathlib import Path

from tests.services.conftest import start_server

PAGE = Path(__file__).resolve().parents[2] / "docs" / "integrations.md"


def _run(block: str) -> None:
    """Execute ``block``; its last expression's ``# result`` (on its line or the next) must
    hold."""
    *body, last = block.strip().splitlines()
    if last.lstrip().startswith("#"):  # the result on a line of its own
        *body, line = body
        expression, expected = line, last.lstrip()[1:]
    else:
        expression, _, expected = last.partition("#")
    scope: dict = {}
    exec("\n".join(body), scope)
    assert eval(expression, scope) == ast.literal_eval(expected.strip())


def test_the_integration_examples_run(tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)
    assert len(blocks) == 2
    server = start_server(tmp_path / "o.db", "--workers", "1", "--timeout", "2")
    try:
        for block in blocks:
            _run(block.replace("http://127.0.0.1:5000", server.url))
    finally:
        server.stop()
