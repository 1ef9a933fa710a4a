"""The documentation's promises that a test can keep: a short README, and no reference to a
file the repository does not have."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOP = ("agents", "bench", "benchmarks", "configs", "docs", "envs", "experiments", "integrations", "services", "src", "store", "tests", "verifiers")  # fmt: skip
# a repository path: a top-level folder, then path characters, ending in a file name or a '/'
PATH = re.compile(r"(?<![\w./-])((?:" + "|".join(TOP) + r")/[\w./-]*[\w/])")
MARKDOWN = re.compile(r"(?<![\w./-])([\w./-]+\.md)\b")


def sources():
    """The project's own text files: the top-level folders and files at the root (virtual
    environments, builds and run outputs, wherever they are, are not the project's)."""
    skip = {"site", "runs", "build", "dist", "__pycache__"}
    # a benchmark's output committed under docs/ (its bench.json marks it): run folders and
    # configs it wrote, not prose
    outputs = [p.parent for p in (ROOT / "docs").rglob("bench.json")]
    candidates = [p for p in ROOT.iterdir() if p.is_file()]
    for top in TOP:
        candidates += (ROOT / top).rglob("*")
    for path in candidates:
        generated = any(path.is_relative_to(out) for out in outputs) and path.name != "report.md"
        if path.suffix in {".py", ".md", ".yaml", ".toml"} and not generated and not skip & set(path.relative_to(ROOT).parts):  # fmt: skip
            yield path


def test_the_readme_is_a_first_visit_not_a_manual():
    assert len((ROOT / "README.md").read_bytes()) < 15_000


def test_every_repository_path_the_code_and_docs_mention_exists():
    missing = []
    for path in sources():
        text = path.read_text(encoding="utf-8")
        for ref in PATH.findall(text):
            ref = ref.rstrip(".")
            if any(ch in ref for ch in "*<>{}") or not ref.strip("/"):
                continue
            if not (ROOT / ref).exists():
                missing.append(f"{path.relative_to(ROOT)}: {ref}")
        for ref in MARKDOWN.findall(text):
            if "/" in ref or ref in {"README.md", "report.md"}:
                continue  # relative links inside docs/ are checked by mkdocs --strict;
                # report.md is what forkgym bench writes into its output folder
            if not any(ROOT.rglob(ref)):
                missing.append(f"{path.relative_to(ROOT)}: {ref}")
    assert not missing, "\n".join(missing)


def test_the_readme_examples_run():
    """The Python examples a first visit copies (those that need no server) work as written."""
    readme = (ROOT / "README.md").read_text()
    for heading in ("## Verify an answer", "## Step an environment"):
        section = readme.split(heading, 1)[1].split("\n## ", 1)[0]
        code = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
        assert code, heading
        namespace: dict = {}
        exec(compile(code[0], f"README.md {heading}", "exec"), namespace)
    assert namespace["info"]["status"] == "correct" and namespace["branch"] is not None


def _first_column(page: str, header: str) -> set[str]:
    """The backquoted names in the first column of the table whose header row starts with
    ``header`` on ``page`` (docs/...)."""
    lines = (ROOT / page).read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    names = set()
    for line in lines[start + 2 :]:  # past the header and the |---| row
        if not line.startswith("|"):
            break
        names.update(re.findall(r"^\| `(\w+)`", line))
    return names


def test_the_training_page_lists_every_registered_loss_and_estimator():
    from forkgym.agents import ESTIMATORS, LOSSES

    assert {"cispo", "reinforce_pp"} <= set(LOSSES) | set(ESTIMATORS)  # premise
    assert _first_column("docs/training.md", "| `loss` | per-token term") == set(LOSSES)
    assert _first_column("docs/training.md", "| `estimator` | advantage") == set(ESTIMATORS)
