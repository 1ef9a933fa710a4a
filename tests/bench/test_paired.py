"""Paired, hierarchical comparisons on one task list (bench/paired.py)."""

from __future__ import annotations

import math

import pytest
import torch

from forkgym.bench.paired import (
    paired_compare,
    paired_min_detectable,
    seeds_needed,
    variance_parts,
)


def outcomes(seeds: int, tasks: int, shift: float, *, gen: torch.Generator, seed_sd: float = 0.02) -> torch.Tensor:  # fmt: skip
    """0/1 outcomes whose tasks have a shared difficulty (the same for every method: it is
    the tasks' fixed list) plus a per-seed offset of sd ``seed_sd``."""
    difficulty = torch.linspace(0.05, 0.95, tasks, dtype=torch.float64)
    offsets = torch.randn(seeds, 1, generator=gen, dtype=torch.float64) * seed_sd
    p = (difficulty[None, :] + shift + offsets).clamp(0, 1)
    return (torch.rand(seeds, tasks, generator=gen, dtype=torch.float64) < p).double()


def test_pairing_takes_the_shared_task_noise_out():
    gen = torch.Generator().manual_seed(0)
    a, b = (outcomes(5, 1000, 0.0, gen=gen, seed_sd=0.0) for _ in range(2))
    got = paired_compare(a, b, resamples=2000)
    # unpaired: each side's mean carries the tasks' whole spread (~0.26 sd of difficulty)
    pa, pb = float(a.mean()), float(b.mean())
    binomial = math.sqrt(pa * (1 - pa) / 1000 + pb * (1 - pb) / 1000)
    assert got.se < 0.75 * binomial
    assert got.low < got.difference < got.high and got.tasks == 1000 and got.seeds == (5, 5)


def test_under_the_null_it_rejects_about_five_percent():
    gen = torch.Generator().manual_seed(1)
    rejected = 0
    for i in range(60):
        a, b = outcomes(5, 300, 0.0, gen=gen), outcomes(5, 300, 0.0, gen=gen)
        rejected += paired_compare(a, b, resamples=1000, key=(i,)).p < 0.05
    assert rejected <= 9  # 60 tests at 5%: 3 expected, 9 has probability < 0.01


def test_it_finds_a_difference_larger_than_its_minimum_detectable_one():
    gen = torch.Generator().manual_seed(2)
    a, b = outcomes(5, 1000, 0.06, gen=gen), outcomes(5, 1000, 0.0, gen=gen)
    got = paired_compare(a, b, resamples=2000)
    assert got.low < 0.06 < got.high or abs(got.difference - 0.06) < 0.02
    assert paired_min_detectable(got.se, pairs=1) < 0.06 and got.p < 0.01


def test_the_same_key_draws_the_same_resamples_and_bad_shapes_are_refused():
    gen = torch.Generator().manual_seed(3)
    a, b = outcomes(3, 50, 0.0, gen=gen), outcomes(4, 50, 0.1, gen=gen)
    assert paired_compare(a, b, key=("x",)) == paired_compare(a, b, key=("x",))
    with pytest.raises(ValueError, match="one task list"):
        paired_compare(a, b[:, :40])


def test_minimum_detectable_difference_and_seeds_needed():
    assert paired_min_detectable(0.01, pairs=1) == pytest.approx(0.0280, abs=1e-4)
    assert paired_min_detectable(0.01, pairs=10) > paired_min_detectable(0.01, pairs=1)
    gen = torch.Generator().manual_seed(4)
    a, b = outcomes(8, 1000, 0.0, gen=gen, seed_sd=0.05), outcomes(8, 1000, 0.0, gen=gen, seed_sd=0.05)  # fmt: skip
    run_var, task_var = variance_parts(a, b)
    assert 0.0005 < run_var < 0.008  # true 0.0025
    n = seeds_needed(run_var, task_var, 1000, target=0.10, pairs=10)
    assert 2 <= n < 30
    # with the target below what the tasks alone allow, more seeds cannot help
    assert seeds_needed(run_var, task_var, 1000, target=0.001, pairs=10) == math.inf
    assert seeds_needed(0.0, task_var, 1000, target=0.10, pairs=10) == 2
