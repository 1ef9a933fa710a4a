"""The "Adding an environment" example of docs/environments.md works as written."""

import re
import sys
from pathlib import Path

from forkgym.envs import check_llm_env

PAGE = Path(__file__).resolve().parents[2] / "docs" / "environments.md"


def test_the_docs_env_example_passes_the_checker(tmp_path, monkeypatch):
    section = PAGE.read_text().split("## Adding an environment", 1)[1]
    module_code, check_code = re.findall(r"```python\n(.*?)```", section, re.DOTALL)[:2]
    assert "class SquaresEnv(MathEnv)" in module_code
    package = tmp_path / "mypackage"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "squares.py").write_text(module_code)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # for the checker's fresh interpreters
    exec(compile(check_code, "docs/environments.md", "exec"), {})
    report = check_llm_env("mypackage.squares:mine/Squares-v0", cross_process_seeds=8)
    assert report["checks"]["gold_answers_correct"]["seeds"] == 4
    sys.modules.pop("mypackage.squares", None)
