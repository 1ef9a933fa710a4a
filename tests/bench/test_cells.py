"""A finished run's compact figures: what they keep, and that the readers prefer them."""

import gzip
import json

from forkgym.agents.generation.episode_log import write_outcomes
from forkgym.bench.cells import compact_finished, compact_run, read_last_outcomes, read_steps

ROW = {
    "step": 3,
    "eval_accuracy": 0.5,
    "tokens_generated": 120,
    "time/step": 1.5,
    "critic/explained_variance": 0.2,
    "diag/adv/by_length/[16,24)/abs_mean": 0.7,
    "diag/adv/by_length/[16,24)/count": 9,
    "diag/mixed_of_groups": 0.25,
    "loss/policy": -0.1,
    "gen/top_logprob": -2.0,
}
KEPT = ("eval_accuracy", "tokens_generated", "time/step", "critic/explained_variance", "diag/adv/by_length/[16,24)/abs_mean", "diag/mixed_of_groups")  # fmt: skip


def _run(folder, rows, outcomes=()):
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for version, correct in outcomes:
        records = [{"task_seed": i, "task_id": str(i), "correct": c, "valid": True} for i, c in enumerate(correct)]  # fmt: skip
        write_outcomes(folder / "eval" / f"version_{version:07d}.json", records, version)


def test_a_compact_run_keeps_the_reports_figures_and_the_last_outcomes(tmp_path):
    run = tmp_path / "rloo-seed0"
    _run(run, [ROW, {**ROW, "step": 4}], outcomes=[(2, [0, 1]), (4, [1, 1])])
    compact_run(run)
    (run / "metrics.jsonl").unlink()
    for version in (run / "eval").iterdir():
        version.unlink()
    assert [sorted(r) for r in read_steps(run)] == [sorted(KEPT)] * 2
    assert read_steps(run)[1]["eval_accuracy"] == 0.5
    assert read_last_outcomes(run)["correct"] == [1, 1]


def test_compacting_twice_gives_the_same_bytes(tmp_path):
    run = tmp_path / "sft-seed0"
    _run(run, [ROW], outcomes=[(1, [1, 0])])
    compact_run(run)
    first = (run / "steps.jsonl.gz").read_bytes(), (run / "outcomes.json.gz").read_bytes()
    compact_run(run)
    assert ((run / "steps.jsonl.gz").read_bytes(), (run / "outcomes.json.gz").read_bytes()) == first  # fmt: skip
    assert json.loads(gzip.decompress(first[1]))["weight_version"] == 1


def test_without_compact_figures_the_readers_take_the_full_logs(tmp_path):
    run = tmp_path / "ppo-seed0"
    _run(run, [ROW], outcomes=[(1, [0, 1])])
    assert read_steps(run) == [ROW]
    assert read_last_outcomes(run)["correct"] == [0, 1]


def test_only_finished_runs_without_compact_figures_are_compacted(tmp_path):
    done, running, compacted = (tmp_path / "r" / n for n in ("a-seed0", "b-seed0", "c-seed0"))
    for run in (done, running, compacted):
        _run(run, [ROW])
    for run in (done, compacted):
        (run / "done.json").write_text("{}")
    compact_run(compacted)
    assert compact_finished(tmp_path) == 1
    assert (done / "steps.jsonl.gz").exists() and not (running / "steps.jsonl.gz").exists()
    assert compact_finished(tmp_path) == 0
