"""``forkgym/MathDataset-v0`` reading Hugging Face ``datasets`` sources (built here, no hub)."""

import json
import pickle
import sys

import pytest

from forkgym.envs import dataset_sources
from forkgym.envs.dataset import MathDatasetEnv

pytestmark = pytest.mark.integrations

GSM_ROWS = [
    {"id": "a", "question": "2+2?", "answer": "Add them <<2+2=4>>.\n#### 4"},
    {"id": "b", "question": "3*3?", "answer": "9"},
    {"id": "c", "question": "10-7?", "answer": "Subtract.\n#### 3"},
]
MATH_ROWS = [  # no id column: task ids are row numbers, like a JSONL file's line numbers
    {"problem": "Half of 1?", "solution": "It is $\\boxed{\\frac{1}{2}}$.", "level": "Level 1"},
    {"problem": "Solve $2x=8$.", "solution": "So $x=\\boxed{4}$.", "level": "Level 2"},
]


@pytest.fixture
def hf(tmp_path, monkeypatch):
    """``datasets``, with its cache under tmp_path and this module's per-process cache empty."""
    datasets = pytest.importorskip("datasets")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setattr(dataset_sources, "_OPENED", type(dataset_sources._OPENED)())
    datasets.disable_progress_bars()
    return datasets


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def write_parquet(path, rows):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


def sources(hf, root, name, rows):
    """The same rows, named ``name``, as JSONL and in every datasets format (own folders)."""
    for sub in ("jsonl", "parquet", "arrow", "csv", "shards"):
        (root / sub).mkdir()
    shards = root / "shards" / name
    shards.mkdir()
    write_parquet(shards / "part-0.parquet", rows[:1])
    write_parquet(shards / "part-1.parquet", rows[1:])
    hf.Dataset.from_list(rows).save_to_disk(str(root / "arrow" / name))
    hf.Dataset.from_list(rows).to_csv(str(root / "csv" / f"{name}.csv"), index=False)
    return {
        "jsonl": write_jsonl(root / "jsonl" / f"{name}.jsonl", rows),
        "parquet": write_parquet(root / "parquet" / f"{name}.parquet", rows),
        "save_to_disk": str(root / "arrow" / name),
        "arrow file": str(next((root / "arrow" / name).glob("*.arrow"))),
        "csv": str(root / "csv" / f"{name}.csv"),
        "parquet glob": str(shards / "*.parquet"),
        "parquet folder": str(shards),
    }


@pytest.mark.parametrize(("name", "rows"), [("gsm", GSM_ROWS), ("math", MATH_ROWS)])
def test_datasets_sources_give_the_jsonl_tasks(hf, tmp_path, name, rows):
    paths = sources(hf, tmp_path, name, rows)
    jsonl = MathDatasetEnv(path=paths.pop("jsonl"))
    seeded = [jsonl.reset(seed=s)[1]["task_id"] for s in range(12)]
    hashes = set()
    for kind, path in paths.items():
        env = MathDatasetEnv(path=path)
        if kind == "arrow file":  # named after its file, data-00000-of-00001
            env._rows.name = env.dataset = name
        assert env.tasks is None and env.num_tasks == len(rows), kind
        assert [env.task_from_id(i) for i in jsonl.tasks] == list(jsonl.tasks.values()), kind
        # same row order, so a seed draws the same row in every format
        assert [env.reset(seed=s)[1]["task_id"] for s in range(12)] == seeded, kind
        hashes.add(env.identity["sha256"])
    assert len(hashes) == len(paths) - 2  # the arrow file is the folder's; glob and folder agree


def test_column_mapping_and_auto_detection(hf, tmp_path, inline_verifier):
    rows = [
        {"uid": 7, "prompt_text": "1+1?", "target": "2", "hard": 1},
        {"uid": 9, "prompt_text": "Compute $3^2$.", "target": "Thus $\\boxed{9}$.", "hard": 2},
    ]
    path = write_parquet(tmp_path / "custom.parquet", rows)
    env = MathDatasetEnv(
        path=path,
        columns={"question": "prompt_text", "answer": "target", "id": "uid", "difficulty": "hard"},
        verifier=inline_verifier,
    )
    assert env.config["columns"]["question"] == "prompt_text"
    task = env.task_from_id("custom:7")
    assert (task.answer, task.difficulty, task.family) == ("2", 1, "math")
    env.reset(options={"task_id": "custom:9"})
    assert env.step(env.gold_action())[4]["status"] == "correct"
    # A MATH-500 shaped set maps itself: problem, solution (boxed wins over answer), unique_id
    auto = [{"unique_id": "u/1", "problem": "2*3?", "solution": "$\\boxed{6}$", "answer": "6"}]
    env = MathDatasetEnv(path=write_parquet(tmp_path / "m500.parquet", auto))
    task = env.task_from_id("m500:u/1")
    assert (task.answer, task.solution) == ("6", "$\\boxed{6}$")


def test_a_missing_column_error_lists_the_columns(hf, tmp_path):
    path = write_parquet(tmp_path / "odd.parquet", [{"text": "1+1?", "label": "2"}])
    with pytest.raises(
        ValueError, match=r"no question and no answer or solution column.*\['text', 'label'\]"
    ):
        MathDatasetEnv(path=path)
    with pytest.raises(ValueError, match=r"no column 'q' \(mapped to 'question'\).*'label'"):
        MathDatasetEnv(path=path, columns={"question": "q", "answer": "label"})
    with pytest.raises(ValueError, match="roles"):
        MathDatasetEnv(path=path, columns={"prompt": "text"})
    with pytest.raises(ValueError, match="hub datasets"):
        MathDatasetEnv(path=path, subset="main", columns={"question": "text", "answer": "label"})


def test_a_bad_row_is_an_error_naming_its_row_when_drawn(hf, tmp_path):
    rows = [*GSM_ROWS, {"id": "d", "question": "   ", "answer": "1"}]
    env = MathDatasetEnv(path=write_parquet(tmp_path / "bad.parquet", rows))  # lazily validated
    with pytest.raises(ValueError, match=r"bad row 4 \(index 3\): needs a non-empty 'question'"):
        env.reset(options={"task_id": "bad:d"})
    dupes = [GSM_ROWS[0], GSM_ROWS[0]]
    with pytest.raises(ValueError, match="duplicate ids"):
        MathDatasetEnv(path=write_parquet(tmp_path / "dupes.parquet", dupes))


@pytest.mark.parametrize("kind", ["parquet", "arrow"])
def test_identity_is_the_content_and_states_do_not_cross_versions(hf, tmp_path, kind):
    def write(rows):
        if kind == "parquet":
            return write_parquet(tmp_path / "d.parquet", rows)
        hf.Dataset.from_list(rows).save_to_disk(str(tmp_path / "d"))
        return str(tmp_path / "d")

    path = write(GSM_ROWS)
    env = MathDatasetEnv(path=path)
    env.reset(seed=0)
    state = env.get_state()
    assert MathDatasetEnv(path=write(GSM_ROWS)).identity == env.identity  # same bytes rewritten
    changed = [dict(GSM_ROWS[0], answer="#### 5"), *GSM_ROWS[1:]]
    other = MathDatasetEnv(path=write(changed))
    assert other.identity["sha256"] != env.identity["sha256"]
    with pytest.raises(ValueError, match="does not fit"):
        other.set_state(state)


def test_seeded_resets_forks_and_restored_states_agree(hf, tmp_path, inline_verifier):
    path = write_parquet(tmp_path / "g.parquet", GSM_ROWS)
    one, two = MathDatasetEnv(path=path), MathDatasetEnv(path=path)
    assert [one.reset(seed=s)[0] for s in range(8)] == [two.reset(seed=s)[0] for s in range(8)]
    one.reset(seed=3)
    twin = one.fork()
    assert twin.task == one.task and twin.identity == one.identity
    dataset_sources._OPENED.clear()  # a fresh process: the id is found by scanning the column
    fresh = MathDatasetEnv(path=path, verifier=inline_verifier)
    fresh.set_state(one.get_state())
    assert fresh.task == one.task
    gold = one.gold_action()
    assert twin.step(gold)[1:4] == fresh.step(gold)[1:4] == (1.0, True, False)
    with pytest.raises(ValueError, match="ids look like 'g:a'"):
        fresh.reset(options={"task_id": "g:nope"})


def test_an_env_pickles_after_a_step(hf, tmp_path):
    env = MathDatasetEnv(path=write_parquet(tmp_path / "p.parquet", GSM_ROWS), max_attempts=2)
    env.reset(seed=5)
    env.step("no answer here")  # a retry: the episode goes on
    copy = pickle.loads(pickle.dumps(env))
    a, b = env.step(env.gold_action()), copy.step(copy.gold_action())
    assert a[0] == b[0] and a[1:4] == b[1:4] == (1.0, True, False)


def test_a_large_dataset_is_read_lazily(hf, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = 200_000
    table = pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "question": [f"What is {i} + 1?" for i in range(n)],
            "answer": [str(i + 1) for i in range(n)],
        }
    )
    pq.write_table(table, tmp_path / "big.parquet")
    env = MathDatasetEnv(path=str(tmp_path / "big.parquet"))
    assert env.tasks is None and env.num_tasks == n
    assert not any(isinstance(v, (dict, list)) and len(v) > 100 for v in vars(env).values())
    assert env._rows.dataset.data.__class__.__name__ == "MemoryMappedTable"
    assert len(pickle.dumps(env)) < 1_000_000  # the map's file name, not the rows
    assert env.task_from_id(f"big:{n - 1}").answer == str(n)
    assert env.reset(seed=1)[1]["task_id"] == MathDatasetEnv(path=str(tmp_path / "big.parquet")).reset(seed=1)[1]["task_id"]  # fmt: skip
    with pytest.raises(ValueError, match="not in dataset"):
        env.task_from_id("big:007")


def test_without_datasets_the_error_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # `import datasets` now fails
    (tmp_path / "x.parquet").write_bytes(b"PAR1")
    with pytest.raises(ImportError, match=r"pip install 'forkgym\[datasets\]'"):
        MathDatasetEnv(path=str(tmp_path / "x.parquet"))
    jsonl = write_jsonl(tmp_path / "x.jsonl", GSM_ROWS)  # JSONL needs no datasets
    assert list(MathDatasetEnv(path=jsonl).tasks) == ["x:a", "x:b", "x:c"]
    assert dataset_sources.is_datasets_source("openai/gsm8k")  # not a local path: the hub
    with pytest.raises(ImportError, match="forkgym"):
        MathDatasetEnv(path="openai/gsm8k", subset="main", split="test")
