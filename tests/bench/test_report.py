"""The report reads the run folders: marks of the budget, budget accounting, verdicts."""

import json
import math

import pytest
import torch

from forkgym.bench.presets import PRESETS
from forkgym.bench.report import _pairs_table, summarise, verdict

REGIME = PRESETS["smoke"].regimes[0]  # budget 400
FRACTIONS = (0.25, 0.5, 0.75, 1.0)


def _run(folder, steps):
    """A run's metrics.jsonl: ``steps`` = [(tokens generated, eval accuracy or None)]."""
    folder.mkdir(parents=True)
    total, rows = 0, []
    for i, (tokens, acc) in enumerate(steps, 1):
        total += tokens
        row = {"step": i, "tokens_generated": tokens, "tokens_generated_total": total,
               "tokens_trained": tokens // 2, "time/step": 0.5, "diag/response_length_mean": 5.0 + i}  # fmt: skip
        if acc is not None:
            row.update(eval_accuracy=acc, **{"time/eval": 2.0})
        rows.append(row)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_accuracy_at_a_mark_is_the_first_evaluation_past_it_and_the_budget_is_checked(tmp_path):
    folder = _run(tmp_path / "rloo-seed0", [(90, None), (90, 0.3), (90, 0.35), (90, 0.4), (90, 0.5)])  # fmt: skip
    s = summarise(folder, "rloo", 0, REGIME, 0.2, FRACTIONS)
    assert s.at == {0.25: 0.3, 0.5: 0.35, 0.75: 0.4, 1.0: 0.5}
    assert s.final == 0.5 and s.curve[0] == (0.0, 0.0, 0.2)
    assert s.tokens_generated == 450 and s.tokens_trained == 225 and s.steps == 5
    assert s.train_s == pytest.approx(2.5) and s.eval_s == pytest.approx(8.0)
    assert s.within_budget  # 450 >= 400, and 360 before the last step < 400
    over = summarise(_run(tmp_path / "rloo-seed1", [(90, 0.3)] * 6), "rloo", 1, REGIME, 0.2, FRACTIONS)  # fmt: skip
    assert not over.within_budget  # it went on past the step that reached the budget
    short = summarise(_run(tmp_path / "rloo-seed2", [(90, 0.3)] * 4), "rloo", 2, REGIME, 0.2, FRACTIONS)  # fmt: skip
    assert not short.within_budget and math.isnan(short.at[1.0])


def _fake(final, outcomes=None, tasks=None):
    class S:
        pass

    s = S()
    s.final = final
    s.outcomes, s.task_seeds = outcomes, tasks
    return s


def test_methods_evaluated_on_the_same_tasks_are_compared_paired():
    """b gets right what a gets right, less 20 of 400 tasks, in every seed: unpaired, 0.05 on
    400 tasks is within the two binomial errors; paired task by task it is not."""
    tasks = list(range(400))
    right = [1] * 200 + [0] * 200
    worse = [1] * 180 + [0] * 220

    def runs(paired_):
        return {
            "a": [_fake(0.5, right if paired_ else None, tasks) for _ in range(3)],
            "b": [_fake(0.45, worse if paired_ else None, tasks) for _ in range(3)],
        }

    assert "a above b" not in verdict(runs(False), 400)
    text = verdict(runs(True), 400)
    assert "a above b" in text and "paired over the same tasks" in text
    assert "seeds, then the same tasks" in "\n".join(_pairs_table(runs(True), 400))
    # other task lists: no pairing
    other = runs(True)
    other["b"] = [_fake(0.45, worse, list(range(1, 401))) for _ in range(3)]
    assert "a above b" not in verdict(other, 400)


def test_a_verdict_claims_a_win_only_when_every_corrected_test_separates_it():
    clear = {"a": [_fake(x) for x in (0.80, 0.82, 0.81)], "b": [_fake(x) for x in (0.30, 0.31, 0.29)]}  # fmt: skip
    text = verdict(clear, 400)
    assert "it wins this regime" in text and "**a**" in text and "a above b" in text
    close = {"a": [_fake(x) for x in (0.60, 0.40, 0.50)], "b": [_fake(x) for x in (0.45, 0.50, 0.48)]}  # fmt: skip
    text = verdict(close, 100)
    assert "not established (not separated, Holm-corrected) over: b" in text and "wins" not in text
    assert "separated at family-wise 5% over 1 comparisons: none" in text


def test_the_evaluation_sets_own_error_can_keep_seed_tight_pairs_apart():
    """Seeds that agree to 0.01 do not separate 0.50 from 0.46 measured on 100 tasks: the
    tasks' binomial error (about 0.05 each) dominates."""
    runs = {"a": [_fake(x) for x in (0.50, 0.51, 0.50)], "b": [_fake(x) for x in (0.46, 0.46, 0.47)]}  # fmt: skip
    assert "a above b" not in verdict(runs, 100)
    assert "a above b" in verdict(runs, 100_000)


def test_holm_corrects_for_the_number_of_pairs():
    """Ten methods, one pair at uncorrected p ~ 0.01: not separated among 45 comparisons."""
    from forkgym.bench.report import comparisons

    runs = {"a": [_fake(x) for x in (0.62, 0.58, 0.60)], "b": [_fake(x) for x in (0.50, 0.52, 0.48)]}  # fmt: skip
    runs.update({f"m{i}": [_fake(0.55 + 0.01 * j) for j in (-1, 0, 1)] for i in range(8)})
    [(pair, holm_p)] = [(c, ph) for c, ph in comparisons(runs, 10**6) if {c.a, c.b} == {"a", "b"}]
    assert pair.p < 0.05 <= holm_p


# (anchor_fraction, anchor_size_mean, text_groups, text_mixed_fraction, step_adv_abs_mean) per
# step, or None for a step that logged none (a step with no tokens to train on)
ANCHORS = {
    0: [(0.5, 2.0, 2.0, 0.5, 0.1), (0.7, 3.0, 4.0, 0.25, 0.3)],
    1: [(0.6, 2.0, 0.0, 0.0, 0.2), None, (0.8, 3.0, 2.0, 1.0, 0.2)],
}


def _fake_bench(out, regime, methods):
    """A finished benchmark's folder as the report reads it: the regime's warm start and, per
    method and seed, ``metrics.jsonl`` (gigpo's with its anchor statistics) and ``done.json``."""
    from forkgym.bench.runner import run_dir

    warm = out / regime.warm_dir / "warm"
    warm.mkdir(parents=True)
    (warm / "warm.json").write_text(json.dumps({"accuracy": 0.2, "sft_tokens": 1000}))
    for method in methods:
        for seed, steps in ANCHORS.items():
            folder = run_dir(out, regime, method, seed)
            _run(folder, [(regime.budget_tokens // len(steps) + 1, 0.3 + 0.1 * i) for i in range(len(steps))])  # fmt: skip
            rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]  # fmt: skip
            for row, step in zip(rows, steps, strict=True):
                if method == "gigpo" and step is not None:
                    keys = ("anchor_fraction", "anchor_size_mean", "text_groups", "text_mixed_fraction", "step_adv_abs_mean")  # fmt: skip
                    row.update({f"gigpo/{k}": v for k, v in zip(keys, step, strict=True)})
            (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            (folder / "done.json").write_text(json.dumps({"method": method, "seed": seed}))


def _boundary_regime(regime_name):
    from dataclasses import replace

    from forkgym.bench.presets import narrow

    preset = narrow(PRESETS["boundary"], [regime_name], budget=300, seeds=list(ANCHORS))
    return replace(preset, eval_episodes=8)


def test_the_report_shows_gigpos_anchor_states_pooled_over_every_step_and_seed(tmp_path):
    from forkgym.bench.report import write_report

    preset = _boundary_regime("steps2-k8")
    _fake_bench(tmp_path, preset.regimes[0], ["grpo", "gigpo"])
    text = write_report(tmp_path, preset, log=lambda _: None).read_text()
    section = text[text.index("Anchor states (gigpo)") :].split("\n\n")[1].splitlines()
    assert section[0].startswith("| method | runs | steps | turns in anchor groups |")
    [row] = section[2:]  # gigpo's row alone: grpo logged no anchor statistics
    # 4 steps logged: fractions 0.5 0.7 0.6 0.8, sizes 2 3 2 3, step sizes 0.1 0.3 0.2 0.2;
    # text-matched groups 2 + 4 + 0 + 2 = 8, of which 1 + 1 + 0 + 2 mix states (not the mean
    # of the steps' fractions, 0.4375)
    assert row == "| gigpo | 2 | 4 | 0.650 | 2.50 | 2.00 | 0.500 | 0.200 |"
    assert text.index("Anchor states (gigpo)") > text.index("## steps2-k8")


def test_the_anchor_section_is_absent_without_a_gigpo_run(tmp_path):
    from forkgym.bench.report import write_report

    preset = _boundary_regime("steps2-k8")
    _fake_bench(tmp_path, preset.regimes[0], ["grpo", "rloo"])
    text = write_report(tmp_path, preset, log=lambda _: None).read_text()
    assert "## steps2-k8" in text and "| grpo | 2 |" in text
    assert "Anchor states" not in text


def test_a_run_without_gigpo_metrics_has_no_anchor_sums(tmp_path):
    from forkgym.bench.report import anchor_lines

    folder = _run(tmp_path / "grpo-seed0", [(90, None), (90, 0.3), (90, 0.35), (90, 0.4), (90, 0.5)])  # fmt: skip
    s = summarise(folder, "grpo", 0, REGIME, 0.2, FRACTIONS)
    assert s.anchors == {} and anchor_lines({"grpo": [s]}) == []


def test_plan_reads_the_pilots_per_task_outcomes_and_says_how_many_seeds(tmp_path):
    from forkgym.agents.generation.episode_log import write_outcomes
    from forkgym.bench.report import plan_lines
    from forkgym.bench.runner import run_dir

    preset = _boundary_regime("steps2-k8")
    regime = preset.regimes[0]
    _fake_bench(tmp_path, regime, ["grpo", "gigpo", "ppo"])
    gen = torch.Generator().manual_seed(0)
    for method in ("grpo", "gigpo"):  # ppo recorded nothing: left out of the plan
        for seed in ANCHORS:
            right = (torch.rand(300, generator=gen) < 0.5).int().tolist()
            records = [{"task_seed": t, "task_id": f"t{t}", "correct": c, "valid": True} for t, c in enumerate(right)]  # fmt: skip
            write_outcomes(run_dir(tmp_path, regime, method, seed) / "eval" / "version_0000003.json", records, 3)  # fmt: skip
    text = "\n".join(plan_lines(tmp_path, preset, 0.10))
    assert "| gigpo − grpo | 2 | 300 |" in text and "ppo" not in text
    assert text.rstrip().endswith(" |") and "more tasks needed" not in text
    # two coin-flip methods on 300 tasks: for 0.02 the tasks' part alone is too large
    assert "more tasks needed" in "\n".join(plan_lines(tmp_path, preset, 0.02))


def test_the_area_under_the_curve_is_the_mean_accuracy_over_the_budget(tmp_path):
    # evaluations at 100, 200, 300, 400 tokens of a 400-token budget, from 0.2 at the start
    run = summarise(_run(tmp_path / "grpo-seed0", [(100, 0.4), (100, 0.4), (100, 0.6), (100, 0.6)]), "grpo", 0, REGIME, 0.2, FRACTIONS)  # fmt: skip
    # trapezoids: 0.25 * (0.3 + 0.4 + 0.5 + 0.6)
    assert run.auc == pytest.approx(0.45)
    early = summarise(_run(tmp_path / "grpo-seed1", [(100, 0.6), (100, 0.6), (100, 0.6), (100, 0.6)]), "grpo", 1, REGIME, 0.2, FRACTIONS)  # fmt: skip
    assert early.final == run.final and early.auc > run.auc
