"""The invariants of docs/design.md that the code's own text can be checked for.

Each test reads the source of ``forkgym.agents`` with :mod:`ast` (no module is run), so a
change that breaks a rule fails here with the file and line that break it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import forkgym.agents
from forkgym.agents.advantages.base import ALGORITHMS
from forkgym.agents.advantages.estimators import ESTIMATORS
from forkgym.agents.generation.backends.registry import BACKENDS
from forkgym.agents.learner.losses import LOSSES
from forkgym.agents.learner.schedules import LR_SCHEDULES

AGENTS = Path(forkgym.agents.__file__).parent
PACKAGE = "forkgym.agents"
# the stages after the batch is built: they read grids and rows, never an episode
AFTER_THE_BATCH = ("trainer", "shaping", "advantages", "algorithms", "estimators", "ppo", "raft", "vine",
                   "critic", "learner", "passes", "losses", "reductions", "diagnostics", "drift")  # fmt: skip
EPISODE_ATTRIBUTES = {"groups", "episodes", "sampled", "branches"}


def modules(*, bench: bool = True) -> dict[str, Path]:
    """Every module of forkgym.agents by dotted name (a package by its own name); without
    ``bench``, the training library alone (``forkgym bench``'s package left out)."""
    out = {}
    for path in sorted(AGENTS.rglob("*.py")):
        parts = [PACKAGE, *path.relative_to(AGENTS).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        if bench or parts[1:2] != ["bench"]:
            out[".".join(parts)] = path
    return out


def tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``name`` imports anywhere in its text: at the top, inside
    functions, and under ``TYPE_CHECKING`` (a type is a dependency too)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(tree(path)):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                full = f"{target}.{alias.name}"
                out.add(full if full in known else target)
        elif isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
    return (out & known) - {name}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_inside_agents():
    found = modules()
    graph = {name: imports(name, path, set(found)) for name, path in found.items()}
    assert graph[f"{PACKAGE}.algorithms"] >= {f"{PACKAGE}.config", f"{PACKAGE}.ppo"}  # premise
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def _compared_names(path: Path, names: set[str]) -> list[str]:
    """``x == "rloo"``, ``x in ("transformers", "hf")``, ...: a registered name in a comparison."""
    out = []
    for node in ast.walk(tree(path)):
        if not isinstance(node, ast.Compare):
            continue
        for side in (node.left, *node.comparators):
            elements = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
            for e in elements:
                if isinstance(e, ast.Constant) and e.value in names:
                    out.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return out


def test_no_code_compares_a_registered_name():
    """A part declares what it needs (needs_group, needs_greedy, batch_wide, owns_model,
    shares_model, ...); the training library never asks which part it is by its name.
    (``forkgym.bench`` compares its own methods' names in its report, by design.)"""
    names = {n for r in (ALGORITHMS, ESTIMATORS, LOSSES, BACKENDS, LR_SCHEDULES) for n in r}
    assert {"rloo", "ppo", "transformers", "hf", "vllm"} <= names  # premise
    library = modules(bench=False).values()
    assert [hit for path in library for hit in _compared_names(path, names)] == []
    # the finder finds a comparison where there is one: `data_parallel in ("replicate", ...)`
    assert _compared_names(AGENTS / "config.py", {"replicate"})


@pytest.mark.parametrize("stage", AFTER_THE_BATCH)
def test_nothing_after_the_batch_reads_episodes(stage):
    """Stages after the batch read its grids and rows: none imports the episode types or
    walks ``batch.groups``/``.episodes``/``.sampled``/a group's ``.branches``."""
    path = AGENTS / f"{stage}.py"
    read = [
        f"{stage}.py:{node.lineno}: .{node.attr}"
        for node in ast.walk(tree(path))
        if isinstance(node, ast.Attribute) and node.attr in EPISODE_ATTRIBUTES
    ]
    assert read == []
    assert f"{PACKAGE}.episode" not in imports(f"{PACKAGE}.{stage}", path, set(modules()))


def test_the_episode_readers_are_found():
    """The check above would see a walk over episodes: the batch and the episode log do one."""
    for stage in ("batch", "episode_log"):
        attributes = {n.attr for n in ast.walk(tree(AGENTS / f"{stage}.py")) if isinstance(n, ast.Attribute)}  # fmt: skip
        assert attributes & EPISODE_ATTRIBUTES, stage


# names whose appearance in a condition of the loop would mean it branches on how a stage is
# done: synchronous or asynchronous generation, one engine or a pool, ranks, shards
HOW = {"max_staleness", "prefetch", "generation_engines", "size", "main", "rank", "sharded",
       "shards", "data_parallel", "Prefetcher", "EnginePool"}  # fmt: skip


def test_the_trainer_never_branches_on_how_a_stage_is_done():
    conditions = []
    for node in ast.walk(tree(AGENTS / "trainer.py")):
        if isinstance(node, (ast.If, ast.IfExp, ast.While)):
            conditions.append(node.test)
        elif isinstance(node, ast.BoolOp):
            conditions.extend(node.values)
        elif isinstance(node, ast.comprehension):
            conditions.extend(node.ifs)
    named = {
        n.attr if isinstance(n, ast.Attribute) else n.id
        for c in conditions
        for n in ast.walk(c)
        if isinstance(n, (ast.Attribute, ast.Name))
    }
    assert named & HOW == set()
    assert len((AGENTS / "trainer.py").read_text().splitlines()) <= 350


def test_every_key_comes_from_seeds():
    """No module of the training library but agents/seeds.py composes a seed: no ``seed +
    i``, no hash of a key. (``forkgym bench`` seeds its SFT baseline with ``1000 + seed``.)"""
    found = []
    for name, path in modules(bench=False).items():
        if name == f"{PACKAGE}.seeds":
            continue
        for node in ast.walk(tree(path)):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
                operands = (node.left, node.right)
                if any(isinstance(o, (ast.Name, ast.Attribute)) and "seed" in ast.unparse(o) for o in operands):  # fmt: skip
                    found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
            if isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] in {"request_seed", "key_digest", "blake2b"}:  # fmt: skip
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node.func)}")
    assert found == []


def test_sharding_is_detected_once():
    """The learner asks the model whether it is sharded; everything else is told."""
    asked = []
    for name, path in modules(bench=False).items():
        for node in ast.walk(tree(path)):
            text = ast.unparse(node) if isinstance(node, ast.Call) else ""
            if text.startswith(("is_sharded(", "hasattr(")) and ("is_sharded" in text or "full_tensor" in text):  # fmt: skip
                asked.append(f"{name}:{node.lineno}: {text}")
    assert asked == [
        f"{PACKAGE}.learner:{_line('learner', 'is_sharded(model)')}: is_sharded(model)"
    ]


def _line(stage: str, text: str) -> int:
    lines = (AGENTS / f"{stage}.py").read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line and "def " not in line)
