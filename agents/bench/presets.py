"""Benchmark presets: which regimes, methods, seeds and budget ``forkgym bench`` runs.

A :class:`Regime` is one side of the seed's boundary: a task, a group size and a budget of
generated tokens that every method in it spends. Within a regime every method starts from the
same warm start (SFT on gold demonstrations until held-out greedy accuracy reaches
``warm_accuracy``), trains on the same task seeds and batch at the learning rate its own sweep
chose (``tune_lrs`` on the preset's ``tune_seed``, scored on validation tasks that no report
uses: :mod:`forkgym.agents.bench.tuning`), and is evaluated on the same held-out tasks at the
same fractions of the budget.

* ``smoke``: a check of the machinery for CI (a minute or two): tiny budget, two seeds.
* ``quick``: six methods and five seeds on the quickstart's task (2-digit sums, worked
  answers) at K = 8, 200 evaluation tasks, each method's learning rate swept first; TRL's
  GRPOTrainer beside them when the ``bench`` extra is there.
* ``full``: every method on arithmetic at K = 8 (with the three reductions compared), the
  multi-turn calculator at K = 8, and arithmetic at K = 1, where no group baseline exists.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

__all__ = ["PRESETS", "Preset", "Regime", "narrow"]

_ARITH_SHORT = {"system_prompt": None, "operations": "+", "digits": 1, "solution_style": "compact", "instruction": False}  # fmt: skip
_ARITH_2 = {"system_prompt": None, "operations": "+", "solution_style": "worked", "instruction": False}  # fmt: skip
_CALCULATOR = {"system_prompt": None, "digits": 2, "terms": 2, "operations": "+*", "solution_style": "answer"}  # fmt: skip


@dataclass(frozen=True)
class Regime:
    name: str
    about: str
    env: str
    env_kwargs: dict[str, Any]
    max_new_tokens: int  # per assistant turn
    k: int
    prompts_per_step: int
    budget_tokens: int  # generated tokens per run
    methods: tuple[str, ...]
    warm_accuracy: float | None  # SFT until held-out greedy accuracy >= this (None: fixed tokens)
    warm_max_tokens: int
    warm_batch_size: int = 32  # demonstrations per SFT step (the warm start and the sft method)
    lr: float = 1e-4
    length_edges: tuple[int, ...] = (4, 8, 16, 32)
    checkpoint_every: int = 5  # steps; an interrupted run resumes from here
    # the learning-rate sweep every method gets on the preset's tuning seed (empty: none, every
    # method at `lr`); PPO's methods sweep their critic's learning rate too
    tune_lrs: tuple[float, ...] = ()
    tune_value_lrs: tuple[float, ...] = ()
    ceiling_prompts: int = 0  # > 0: the critic ceiling on this many fresh prompts (PPO's regimes)
    validation: bool = False  # True in tuning runs: evaluated on the validation set


@dataclass(frozen=True)
class Preset:
    name: str
    regimes: tuple[Regime, ...]
    seeds: tuple[int, ...]
    eval_episodes: int
    eval_fractions: tuple[float, ...] = (0.25, 0.5, 0.75, 1.0)
    tune_seed: int | None = None  # the seed of the tuning runs (never a reported seed)
    extra: dict[str, Any] = field(default_factory=dict)


_SMOKE = Regime(
    name="arithmetic-k4",
    about="1-digit sums, K = 4: a check of the machinery, not a result",
    env="forkgym/Arithmetic-v0",
    env_kwargs=_ARITH_SHORT,
    max_new_tokens=12,
    k=4,
    prompts_per_step=2,
    budget_tokens=400,
    methods=("rloo", "ppo", "raft", "sft"),
    warm_accuracy=None,
    warm_max_tokens=16_000,
    warm_batch_size=16,
    lr=1e-4,
    checkpoint_every=2,
    tune_lrs=(1e-4, 3e-4),
    tune_value_lrs=(1e-4, 1e-3),
    ceiling_prompts=2,
)

_QUICK = Regime(
    name="arithmetic-k8",
    about="2-digit sums with worked answers (the quickstart's task), K = 8 x 8 prompts: many cheap candidates, one reward per episode",
    env="forkgym/Arithmetic-v0",
    env_kwargs=_ARITH_2,
    max_new_tokens=32,
    k=8,
    prompts_per_step=8,
    budget_tokens=100_000,
    methods=("rloo", "grpo", "remax", "ppo", "raft", "sft", "trl_grpo"),
    warm_accuracy=0.3,
    warm_max_tokens=2_000_000,
    lr=2e-4,
    length_edges=(8, 16, 24, 32),
    tune_lrs=(1e-4, 2e-4, 4e-4),
    tune_value_lrs=(2e-4, 1e-3),
    ceiling_prompts=8,
)

_ARITH_FULL = Regime(
    name="arithmetic-k8",
    about="2-digit sums with worked answers, K = 8 x 8 prompts: many cheap candidates, one reward per episode",
    env="forkgym/Arithmetic-v0",
    env_kwargs=_ARITH_2,
    max_new_tokens=32,
    k=8,
    prompts_per_step=8,
    budget_tokens=600_000,
    methods=(
        "reinforce_mean",
        "remax",
        "rloo",
        "grpo",
        "dr_grpo",
        "dapo",
        "gspo",
        "sapo",
        "ppo",
        "ppo_shared",
        "ppo_hybrid",
        "raft",
        "sft",
        "trl_grpo",
        "grpo@seq_mean_token_mean",
        "grpo@dr_grpo_constant",
    ),
    warm_accuracy=0.2,
    warm_max_tokens=2_000_000,
    length_edges=(8, 16, 24, 32),
    tune_lrs=(1e-4, 2e-4, 4e-4),
    tune_value_lrs=(2e-4, 1e-3),
    ceiling_prompts=8,
)

PRESETS: dict[str, Preset] = {
    "smoke": Preset("smoke", (_SMOKE,), seeds=(0, 1), eval_episodes=16, tune_seed=100),
    "quick": Preset("quick", (_QUICK,), seeds=(0, 1, 2, 3, 4), eval_episodes=200, tune_seed=100),
    "full": Preset(
        "full",
        (
            _ARITH_FULL,
            Regime(
                name="calculator-k8",
                about="multi-turn: a calculator call, its result, then the boxed answer; K = 8",
                env="forkgym/Calculator-v0",
                env_kwargs=_CALCULATOR,
                max_new_tokens=40,
                k=8,
                prompts_per_step=8,
                budget_tokens=600_000,
                methods=("rloo", "grpo", "remax", "ppo", "ppo_hybrid", "raft", "sft"),
                warm_accuracy=0.25,
                warm_max_tokens=2_000_000,
                length_edges=(16, 32, 48, 64),
                tune_lrs=(1e-4, 2e-4, 4e-4),
                tune_value_lrs=(2e-4, 1e-3),
            ),
            replace(
                _ARITH_FULL,
                name="arithmetic-k1",
                about="2-digit sums, ONE rollout per prompt (64 prompts): no group baseline exists",
                k=1,
                prompts_per_step=64,
                methods=("reinforce", "reinforce_ema", "remax", "ppo", "raft", "sft"),
            ),
        ),
        seeds=(0, 1, 2, 3, 4),
        eval_episodes=200,
        tune_seed=100,
    ),
}


def narrow(
    preset: Preset,
    regimes: list[str] | None = None,
    budget: int | None = None,
    seeds: list[int] | None = None,
) -> Preset:
    """``preset`` with only the named regimes and, if given, another budget for each and other
    seeds (a resumed run must be asked for the same way: the folder records what it ran)."""
    chosen = preset.regimes
    if regimes:
        known = {r.name for r in preset.regimes}
        unknown = [r for r in regimes if r not in known]
        if unknown:
            raise ValueError(f"unknown regime(s) {unknown} in preset {preset.name!r}; one of {sorted(known)}")  # fmt: skip
        chosen = tuple(r for r in preset.regimes if r.name in regimes)
    if budget is not None:
        chosen = tuple(replace(r, budget_tokens=budget) for r in chosen)
    return replace(preset, regimes=chosen, seeds=tuple(seeds) if seeds else preset.seeds)
