"""The report reads the run folders: marks of the budget, budget accounting, verdicts."""

import json
import math

import pytest

from forkgym.bench.presets import PRESETS
from forkgym.bench.report import summarise, verdict

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


def _fake(final):
    class S:
        pass

    s = S()
    s.final = final
    return s


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
