"""The invariants of docs/design.md that the code's own text can be checked for.

Each test reads the source of the ``forkgym`` package with :mod:`ast` (no module is run), so a
change that breaks a rule fails here with the file and line that break it.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

import pytest

from forkgym.agents.advantages.base import ALGORITHMS
from forkgym.agents.advantages.estimators import ESTIMATORS
from forkgym.agents.generation.backends.registry import BACKENDS
from forkgym.agents.learner.losses import LOSSES
from forkgym.agents.learner.schedules import LR_SCHEDULES

ROOT = Path(__file__).resolve().parents[1]
# the sub-packages of forkgym that have a top-level folder of their own
FOLDERS = ("agents", "bench", "envs", "verifiers", "services", "store", "integrations")


def _location(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    assert spec is not None and spec.submodule_search_locations, package
    return Path(next(iter(spec.submodule_search_locations)))


AGENTS = _location("forkgym.agents")
# the stages after the batch is built: they read grids and rows, never an episode
AFTER_THE_BATCH = ("run/trainer.py", *sorted(
    str(p.relative_to(AGENTS)) for stage in ("advantages", "learner") for p in (AGENTS / stage).glob("*.py")
))  # fmt: skip
EPISODE_ATTRIBUTES = {"groups", "episodes", "sampled", "branches"}
MAX_MODULES_PER_FOLDER = 20
MAX_FUNCTION_LINES = 120
MAX_TRAINER_LINES = 350


def modules() -> dict[str, Path]:
    """Every module of forkgym by dotted name (a package by its own name)."""
    roots = {"forkgym": _location("forkgym")} | {
        f"forkgym.{f}": _location(f"forkgym.{f}") for f in FOLDERS
    }
    out = {}
    for package, root in roots.items():
        for path in sorted(root.rglob("*.py")):
            parts = [package, *path.relative_to(root).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            out.setdefault(".".join(parts), path)
    return out


MODULES = modules()
FORKGYM = _location("forkgym")


def where(name: str) -> str:
    """``agents/run/trainer.py``: a module's path as the repository writes it."""
    return str(MODULES[name].relative_to(ROOT))


def tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING")


def _runtime_nodes(node: ast.AST):
    """Every node under ``node`` but those only type checkers read (``if TYPE_CHECKING:``)."""
    for child in ast.iter_child_nodes(node):
        if _is_type_checking(child):
            for orelse in child.orelse:
                yield orelse
                yield from _runtime_nodes(orelse)
            continue
        yield child
        yield from _runtime_nodes(child)


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``name`` imports when it runs: at the top and inside
    functions. Names a package's :func:`forkgym.surface.surface` table maps to a module count
    as imports of that module (they are imported on first use). Imports under
    ``TYPE_CHECKING`` are left out: no interpreter runs them."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]

    def resolve(module: str | None, level: int) -> str:
        if not level:
            return module or ""
        base = package.split(".")[: len(package.split(".")) - level + 1]
        return ".".join(base + ([module] if module else []))

    out = set()
    for node in _runtime_nodes(tree(path)):
        if isinstance(node, ast.ImportFrom):
            target = resolve(node.module, node.level)
            for alias in node.names:
                full = f"{target}.{alias.name}"
                out.add(full if full in known else target)
        elif isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Call) and ast.unparse(node.func) == "surface":
            table = node.args[1] if len(node.args) > 1 else None
            if isinstance(table, ast.Dict):
                out.update(resolve(v.value.lstrip("."), 1) for v in table.values)  # type: ignore[union-attr]
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


def test_no_import_cycle_in_forkgym():
    """No chain of imports leads a module back to itself, counting imports inside functions
    (they close a cycle at the first call) and a package's lazily imported surface."""
    known = set(MODULES)
    graph = {name: imports(name, path, known) for name, path in MODULES.items()}
    # premises: function-local imports and surface tables are seen
    assert "forkgym.agents.run.config" in graph["forkgym.agents.advantages.algorithms"]
    assert "forkgym.agents.generation.stage" in graph["forkgym.agents.generation"]
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_type_checking_imports_are_left_out():
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import b\nimport c\n"
    nodes = list(_runtime_nodes(ast.parse(source)))
    assert [ast.unparse(n) for n in nodes if isinstance(n, ast.Import)] == ["import c"]


def test_no_folder_holds_more_than_twenty_modules():
    folders: dict[Path, int] = {}
    for path in MODULES.values():
        if path.name != "__init__.py":
            folders[path.parent] = folders.get(path.parent, 0) + 1
    crowded = {str(f.relative_to(ROOT)): n for f, n in folders.items() if n > MAX_MODULES_PER_FOLDER}  # fmt: skip
    assert crowded == {}


def _functions(path: Path):
    for node in ast.walk(tree(path)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node, node.end_lineno - node.lineno + 1


def test_no_function_is_longer_than_120_lines():
    """Outside the tests: the package, the benchmark scripts, the experiments and dev.py."""
    paths = [*MODULES.values(), ROOT / "dev.py"]
    for folder in ("benchmarks", "experiments"):
        paths += sorted((ROOT / folder).rglob("*.py"))
    long = [
        f"{p.relative_to(ROOT)}:{f.lineno}: {f.name} ({n} lines)"
        for p in paths
        for f, n in _functions(p)
        if n > MAX_FUNCTION_LINES
    ]
    assert long == []


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


def _library() -> list[Path]:
    """The training library: forkgym.agents and the integrations (``forkgym bench`` compares
    its own methods' names in its report, by design)."""
    return [p for n, p in MODULES.items() if n.startswith(("forkgym.agents", "forkgym.integrations"))]  # fmt: skip


def test_no_code_compares_a_registered_name():
    """A part declares what it needs (needs_group, needs_greedy, batch_wide, owns_model,
    shares_model, ...); the training library never asks which part it is by its name."""
    names = {n for r in (ALGORITHMS, ESTIMATORS, LOSSES, BACKENDS, LR_SCHEDULES) for n in r}
    assert {"rloo", "ppo", "transformers", "hf", "vllm"} <= names  # premise
    assert [hit for path in _library() for hit in _compared_names(path, names)] == []
    # the finder finds a comparison where there is one: `data_parallel in ("replicate", ...)`
    assert _compared_names(MODULES["forkgym.agents.run.config"], {"replicate"})


# names a part goes by where it is used: probing one of these for a member means the part's
# base class does not say what it can do
PARTS = {"algorithm", "backend", "loss", "estimator", "policy", "engine", "generation",
         "learner", "schedule", "shaping", "critic"}  # fmt: skip


def _probes(module: ast.Module, name: str) -> list[str]:
    out = []
    for node in ast.walk(module):
        if isinstance(node, ast.Call) and ast.unparse(node.func) in {"getattr", "hasattr"}:
            owner = ast.unparse(node.args[0]).split(".")[-1].lower()
            if owner in PARTS or any(owner.endswith(f"_{p}") for p in PARTS):
                out.append(f"{name}:{node.lineno}: {ast.unparse(node)}")
    return out


def test_no_part_is_probed_with_getattr():
    """Algorithms, backends, losses, estimators and policies have base classes with defaults:
    code asks them (``algorithm.needs_greedy``), never probes (``getattr(algorithm, ...)``)."""
    assert [hit for n, p in MODULES.items() for hit in _probes(tree(p), where(n))] == []
    probe = ast.parse("getattr(self.algorithm, 'needs_greedy', False)\nhasattr(old_backend, 'x')")
    assert len(_probes(probe, "sample")) == 2  # the finder finds a probe where there is one


@pytest.mark.parametrize("stage", AFTER_THE_BATCH)
def test_nothing_after_the_batch_reads_episodes(stage):
    """Stages after the batch read its grids and rows: none imports the episode types or
    walks ``batch.groups``/``.episodes``/``.sampled``/a group's ``.branches``."""
    path = AGENTS / stage
    read = [
        f"{stage}:{node.lineno}: .{node.attr}"
        for node in ast.walk(tree(path))
        if isinstance(node, ast.Attribute) and node.attr in EPISODE_ATTRIBUTES
    ]
    assert read == []
    name = "forkgym.agents." + stage.removesuffix(".py").replace("/", ".")
    assert "forkgym.agents.episode" not in imports(name, path, set(MODULES))


def test_the_episode_readers_are_found():
    """The check above would see a walk over episodes: the batch and the episode log do one."""
    assert "run/trainer.py" in AFTER_THE_BATCH and "learner/losses.py" in AFTER_THE_BATCH
    for stage in ("batch.py", "generation/episode_log.py"):
        attributes = {n.attr for n in ast.walk(tree(AGENTS / stage)) if isinstance(n, ast.Attribute)}  # fmt: skip
        assert attributes & EPISODE_ATTRIBUTES, stage


# names whose appearance in a condition of the loop would mean it branches on how a stage is
# done: synchronous or asynchronous generation, one engine or a pool, ranks, shards
HOW = {"max_staleness", "prefetch", "generation_engines", "size", "main", "rank", "sharded",
       "shards", "data_parallel", "Prefetcher", "EnginePool"}  # fmt: skip
TRAINER = AGENTS / "run" / "trainer.py"


def test_the_trainer_never_branches_on_how_a_stage_is_done():
    conditions = []
    for node in ast.walk(tree(TRAINER)):
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
    assert len(TRAINER.read_text().splitlines()) <= MAX_TRAINER_LINES


def _seeded_modules() -> dict[str, Path]:
    """The training library, ``forkgym bench`` and the integrations: everything that seeds
    (``forkgym.keys`` holds the hash and the reset seeds of a split of tasks)."""
    prefixes = ("forkgym.agents", "forkgym.bench", "forkgym.integrations")
    return {n: p for n, p in MODULES.items() if n.startswith(prefixes)}


def _composed_seeds(path: Path) -> list[str]:
    found = []
    for node in ast.walk(tree(path)):
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult, ast.BitXor)):
            operands = (node.left, node.right)
            if any(isinstance(o, (ast.Name, ast.Attribute)) and "seed" in ast.unparse(o).lower() for o in operands):  # fmt: skip
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
        if isinstance(node, ast.Call):
            func = ast.unparse(node.func)
            if func.split(".")[-1] in {"key_digest", "blake2b", "sha256", "Generator", "default_rng", "Random"}:  # fmt: skip
                found.append(f"{path.name}:{node.lineno}: {func}")
            # torch.manual_seed(config.seed) seeds a model's weights with the run seed itself
            if func.endswith("manual_seed") and not ast.unparse(node.args[0]).endswith("seed"):
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_every_key_comes_from_seeds():
    """No module of the training library, the bench or the integrations but agents/seeds.py
    composes a seed or builds a generator: no ``seed + i``, no hash of a key, no
    ``torch.Generator()`` of its own."""
    seeded = _seeded_modules()
    assert "forkgym.integrations.ray" in seeded and "forkgym.bench.ceiling" in seeded  # premise
    found = [
        hit for n, p in seeded.items() if n != "forkgym.agents.seeds" for hit in _composed_seeds(p)
    ]
    assert found == []
    assert _composed_seeds(MODULES["forkgym.agents.seeds"])  # the finder finds seeds.py's own


def test_ranks_come_from_world():
    """Rank and world size are read from torch.distributed in agents/distributed.py alone."""
    asked = {}
    for name, path in MODULES.items():
        for node in ast.walk(tree(path)):
            if isinstance(node, ast.Call):
                func = ast.unparse(node.func)
                if func.split(".")[-1] in {"get_rank", "get_world_size", "is_initialized"} and func.startswith(("dist.", "torch.distributed.")):  # fmt: skip
                    asked.setdefault(where(name), []).append(node.lineno)
    assert set(asked) == {where("forkgym.agents.distributed")}


def test_sharding_is_detected_once():
    """The learner asks the model whether it is sharded; everything else is told."""
    asked = []
    for name, path in MODULES.items():
        for node in ast.walk(tree(path)):
            text = ast.unparse(node) if isinstance(node, ast.Call) else ""
            if text.startswith(("is_sharded(", "hasattr(")) and ("is_sharded" in text or "full_tensor" in text):  # fmt: skip
                asked.append(f"{name}:{text}")
    assert asked == ["forkgym.agents.learner.stage:is_sharded(model)"]


DESIGN = (ROOT / "docs" / "design.md").read_text()


def test_the_stage_table_names_the_timings_the_trainer_logs():
    """design.md's stage table gives each stage's timing key; the trainer times exactly those."""
    documented = set(re.findall(r"^\| \w+ \(`time/(\w+)`\)", DESIGN, flags=re.M))
    timed = {
        node.args[0].value
        for node in ast.walk(tree(TRAINER))
        if isinstance(node, ast.Call)
        and ast.unparse(node.func) == "stages"
        and isinstance(node.args[0], ast.Constant)
    }
    assert "gen" in timed and "update" in timed  # premise
    assert documented == timed


def test_the_map_names_every_folder():
    """design.md's map names every folder of the package (``agents/generation/``, ...)."""
    folders = {
        str(p.parent.relative_to(ROOT)) + "/"
        for n, p in MODULES.items()
        if p.name == "__init__.py" and n != "forkgym"
    }
    assert "agents/learner/" in folders  # premise
    assert sorted(f for f in folders if f"`{f}`" not in DESIGN) == []
