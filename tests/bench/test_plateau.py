"""Where a regime's learning flattens (bench/plateau.py), from hand-made curves."""

import math

import pytest

from forkgym.bench.plateau import budget_lines, find_plateau
from forkgym.bench.summary import RunSummary

BUDGET = 1000


def _summary(method: str, seed: int, at: dict[float, float], start: float = 0.2) -> RunSummary:
    """A finished run that evaluated at the marks of ``at`` (fraction -> accuracy), the one at
    1.0 its final evaluation."""
    curve = [(0.0, 0.0, start)] + [(f * BUDGET, f, acc) for f, acc in sorted(at.items())]
    return RunSummary(
        method=method, seed=seed, kind="sft" if method == "sft" else "rl", budget=BUDGET, start=start, at=dict(at), curve=curve,
        tokens_generated=BUDGET, last_step_tokens=100, tokens_trained=BUDGET, tokens_sampled=BUDGET,
        tokens_accepted=BUDGET, greedy_tokens=0, steps=10, train_s=1.0, eval_s=1.0, s_per_step=0.1,
        groups={}, infra_failures=0, lengths=[],
    )  # fmt: skip


def _runs(curves: dict[str, list[tuple[float, ...]]], fractions=(0.25, 0.5, 0.75, 1.0)):
    """method -> one run per curve (its accuracies at ``fractions``)."""
    return {m: [_summary(m, i, dict(zip(fractions, accs, strict=True))) for i, accs in enumerate(cs)] for m, cs in curves.items()}  # fmt: skip


def test_a_flat_curve_is_at_the_plateau_from_its_first_mark():
    runs = _runs({"grpo": [(0.50, 0.51, 0.50, 0.51), (0.52, 0.51, 0.52, 0.52)]})
    p = find_plateau("r", BUDGET, runs)
    assert p is not None and p.best == "grpo" and p.seeds == 2 and p.methods == ("grpo",)
    assert p.middle == 0.5 and p.gain.mean == pytest.approx(0.005)
    assert p.at_plateau and p.plateau_fraction == 0.25 and p.suggested_tokens == 250
    assert [f for f, _ in p.accuracy] == [0.25, 0.5, 0.75, 1.0]
    assert p.accuracy[-1][1] == pytest.approx(0.515)
    assert math.isfinite(p.gain.half)  # two seeds: an interval over them


def test_a_rising_curve_is_not_and_the_advice_is_to_double():
    runs = _runs({"grpo": [(0.30, 0.40, 0.50, 0.60), (0.32, 0.41, 0.52, 0.63)]})
    p = find_plateau("r", BUDGET, runs)
    assert p is not None and not p.at_plateau
    assert p.gain.mean == pytest.approx(0.21)
    assert p.plateau_fraction is None and p.suggested_tokens is None
    text = "\n".join(budget_lines([p]))
    assert "still rising" in text and "suggest ≥ 2x" in text and "≥ 2,000, then run the pilot again" in text  # fmt: skip


def test_a_gain_exactly_at_the_tolerance_is_at_the_plateau():
    at = _runs({"grpo": [(0.40, 0.50, 0.51, 0.52)]})
    p = find_plateau("r", BUDGET, at)
    assert p is not None and p.at_plateau  # 0.52 - 0.50: 0.02 up to rounding
    assert p.plateau_fraction == 0.5 and p.suggested_tokens == 500  # 0.40 is not within 0.02
    above = _runs({"grpo": [(0.40, 0.50, 0.51, 0.53)]})
    p = find_plateau("r", BUDGET, above)
    assert p is not None and not p.at_plateau
    p = find_plateau("r", BUDGET, above, tolerance=0.03)
    assert p is not None and p.at_plateau and p.tolerance == 0.03


def test_the_best_method_is_the_one_that_ends_highest():
    """sft leads for most of the budget but grpo ends higher: grpo's curve decides, and it is
    still rising though sft's is flat."""
    runs = _runs({
        "sft": [(0.60, 0.60, 0.60, 0.60), (0.61, 0.61, 0.61, 0.61)],
        "grpo": [(0.30, 0.40, 0.55, 0.70), (0.30, 0.42, 0.55, 0.68)],
    })  # fmt: skip
    p = find_plateau("r", BUDGET, runs)
    assert p is not None and p.best == "grpo" and p.methods == ("grpo",)
    assert not p.at_plateau and p.gain.mean == pytest.approx(0.28)


def test_sft_a_reference_decides_only_when_no_rl_method_ran():
    """sft ends highest and still rises; the compared (RL) methods have flattened."""
    runs = _runs({
        "sft": [(0.60, 0.65, 0.70, 0.78), (0.61, 0.66, 0.72, 0.80)],
        "rloo": [(0.40, 0.45, 0.46, 0.46), (0.41, 0.46, 0.46, 0.47)],
    })  # fmt: skip
    p = find_plateau("r", BUDGET, runs)
    assert p is not None and p.best == "rloo" and p.at_plateau and p.suggested_tokens == 500
    alone = find_plateau("r", BUDGET, {"sft": runs["sft"]})
    assert alone is not None and alone.best == "sft" and not alone.at_plateau


def test_without_a_half_way_mark_the_nearest_lower_one_is_used():
    runs = _runs({"grpo": [(0.40, 0.45, 0.46)]}, fractions=(0.3, 0.6, 1.0))
    p = find_plateau("r", BUDGET, runs)
    assert p is not None and p.middle == 0.3 and p.gain.mean == pytest.approx(0.06)
    assert not p.at_plateau and "(30% → 100%)" in "\n".join(budget_lines([p]))
    # no mark at or below half: the warm start (0.2) is the middle
    late = _runs({"grpo": [(0.45, 0.46)]}, fractions=(0.75, 1.0))
    p = find_plateau("r", BUDGET, late)
    assert p is not None and p.middle == 0.0 and p.gain.mean == pytest.approx(0.26)


def test_a_regime_without_runs_has_no_verdict():
    assert find_plateau("r", BUDGET, {"grpo": []}) is None
    assert budget_lines([]) == []


def test_the_report_and_the_plan_print_each_regimes_budget_verdict(tmp_path):
    from forkgym.bench.report import plan_lines, write_report
    from tests.bench.test_report import _boundary_regime, _fake_bench

    preset = _boundary_regime("steps2-k8")
    _fake_bench(tmp_path, preset.regimes[0], ["grpo", "rloo"])  # curves rising 0.1 per evaluation
    report = write_report(tmp_path, preset, log=lambda _: None).read_text()
    section = report[report.index("## Budget") : report.index("## steps2-k8")]
    assert "| steps2-k8 | 300 |" in section and "still rising" in section
    assert "≥ 600, then run the pilot again" in section
    plan = "\n".join(plan_lines(tmp_path, preset, 0.10))
    assert "Budgets, from the pilot in" in plan and "| steps2-k8 | 300 |" in plan
    assert "still rising" in plan
