"""Benchmark presets: which regimes, methods, seeds and budget ``forkgym bench`` runs.

A :class:`Regime` is one side of the seed's boundary: a task, a group size and a budget of
generated tokens that every method in it spends. Within a regime every method starts from the
same warm start (SFT on gold demonstrations until held-out greedy accuracy reaches
``warm_accuracy``), trains on the same task seeds and batch at the learning rate its own sweep
chose (``tune_lrs`` on the preset's ``tune_seeds``, scored on validation tasks that no report
uses: :mod:`forkgym.bench.tuning`), and is evaluated on the same held-out tasks at the
same fractions of the budget.

* ``smoke``: a check of the machinery for CI (a minute or two): tiny budget, two seeds.
* ``quick``: six methods and five seeds on the quickstart's task (2-digit sums, worked
  answers) at K = 8, 200 evaluation tasks, each method's learning rate swept first; TRL's
  GRPOTrainer beside them when the ``bench`` extra is there.
* ``full``: every method on arithmetic at K = 8 (with the three reductions compared), the
  multi-turn calculator at K = 8, and arithmetic at K = 1, where no group baseline exists.
* ``boundary``: one method per way to an advantage side by side (a group baseline: RLOO and
  GRPO; a learned critic: PPO; Monte Carlo values from forks: Vine; with RAFT and SFT as
  references) at K = 1 and K = 8, on arithmetic (one reward per episode, states whose value a
  critic cannot read) and on CheckedSteps at two lengths (each turn's tool result reveals
  progress; GiGPO's turn-level credit from matched states beside them there). Every regime
  evaluates on one fixed list of 1,000 distinct held-out problems and validates on 300 others.
  Every method is swept per regime on two tuning seeds (its learning rate; PPO's critic's rate
  and pretraining steps; Vine's continuations and state spacing). Budgets come from pilots
  (docs/bench.md, "The boundary's pilots"): 960,000 generated tokens on arithmetic, where the
  best RL method still gains about 0.04 a doubling; 240,000 on steps2, where it has flattened;
  480,000 on steps3 until its own pilot.
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
    # the learning-rate sweep every method gets on the preset's tuning seeds (empty: none, every
    # method at `lr`); PPO's methods sweep their critic's learning rate too
    tune_lrs: tuple[float, ...] = ()
    tune_value_lrs: tuple[float, ...] = ()
    # per method name, more axes of its sweep: algorithm_kwargs and the values they are tried
    # at (e.g. {"vine": {"rollouts": (2, 4, 8)}, "ppo": {"value_warmup_steps": (0, 6, 12)}}),
    # or "lr": the method's own learning-rate grid in place of tune_lrs
    tune_options: dict[str, dict[str, tuple[float, ...]]] = field(default_factory=dict)
    # True: every combination of the axes' values (PPO: 3 rates x 2 critic rates x 2 warm-ups,
    # 12 settings); False: a coordinate search, the learning rate's values first (every other
    # axis at the method's own value, or the axis's first), then each other axis's values at
    # the choice so far, one axis after another (PPO: 3 + 1 + 1 settings)
    tune_crossed: bool = True
    ceiling_prompts: int = 0  # > 0: the critic ceiling on this many fresh prompts (PPO's regimes)
    ceiling_stride: int = 1  # score every stride-th action token of a turn (its first included)
    validation: bool = False  # True in tuning runs: evaluated on the validation set
    # without a sweep: settings chosen elsewhere, per method ({"lr": ..., "value_lr": ...});
    # a method not named here trains at `lr`
    fixed: dict[str, dict[str, float]] = field(default_factory=dict)
    warm_name: str | None = None  # share the warm start of the regime of this name
    vine_error_prompts: int = 0  # > 0: vine's values against a high-rollout reference

    @property
    def warm_dir(self) -> str:
        """The folder (under the output) whose ``warm/`` holds this regime's warm start."""
        return self.warm_name or self.name


@dataclass(frozen=True)
class Preset:
    name: str
    regimes: tuple[Regime, ...]
    seeds: tuple[int, ...]
    eval_episodes: int  # the reported evaluation's tasks: one fixed list of distinct problems
    eval_fractions: tuple[float, ...] = (0.25, 0.5, 0.75, 1.0)
    tune_seeds: tuple[int, ...] = ()  # the tuning runs' seeds, never reported (empty: no sweep)
    extra: dict[str, Any] = field(default_factory=dict)
    # the validation tasks (the tuning runs' score, the warm start's stopping rule); None:
    # as many as eval_episodes
    validation_episodes: int | None = None

    def held_out_episodes(self, regime: Regime) -> int:
        """How many tasks ``regime``'s held-out set has: the validation set's in a tuning run
        (``regime.validation``), else the reported evaluation's."""
        if regime.validation and self.validation_episodes is not None:
            return self.validation_episodes
        return self.eval_episodes


_SMOKE = Regime(
    name="arithmetic-k4",
    about="1-digit sums, K = 4: a check of the machinery, not a result",
    env="forkgym/Arithmetic-v0",
    env_kwargs=_ARITH_SHORT,
    max_new_tokens=12,
    k=4,
    prompts_per_step=2,
    budget_tokens=400,
    methods=("rloo", "ppo", "vine", "raft", "sft"),
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

# the boundary's sweep, run per regime on the tuning seeds: every method's learning rate; PPO's
# critic's rate and its pretraining steps (0: none); Vine's continuations per state and the
# tokens between its states inside a turn. A choice at an edge is followed past it
# (bench/tuning.py), so a grid only has to bracket the likely choice: each learning-rate grid
# is centred on its pilots' choices (docs/bench.md, "The boundary's pilots"). RLOO chose 5e-5
# on arithmetic at 960k tokens (1e-4 0.702, 2.5e-5 0.668 against 0.720) and on CheckedSteps
# (2e-4 fell to 0.20, 4e-4 to 0.00); SFT chose 8e-4 on arithmetic and 2e-4 on CheckedSteps.
# The RL methods share one grid. The axes are searched one at a time (`tune_crossed`
# False): PPO's and Vine's 5 settings each instead of 12 take the regime's sweep from 72
# runs to 44 (at 960k tokens, 3 to 8 minutes each, two side by side on 2 cores).
_RL_LRS = (2.5e-5, 5e-5, 1e-4)
_BOUNDARY_VALUE_LRS = (2e-4, 1e-3)
_BOUNDARY_OPTIONS: dict[str, dict[str, tuple[float, ...]]] = {
    "ppo": {"value_warmup_steps": (0, 6)},
    "vine": {"rollouts": (2, 4), "chunk": (16, 32)},
}
_ARITH_OPTIONS = {**_BOUNDARY_OPTIONS, "sft": {"lr": (4e-4, 8e-4, 1.6e-3)}}
_STEPS_OPTIONS = {**_BOUNDARY_OPTIONS, "sft": {"lr": (1e-4, 2e-4, 4e-4)}}
# one method per way to an advantage (a group: RLOO and GRPO; a learned critic: PPO; Monte
# Carlo values from forks: Vine; anchor states: GiGPO, multi-turn only), RAFT and SFT as
# references; the variants (ReMax, REINFORCE-EMA, the PPO hybrid) stay in `quick` and `full`
_BOUNDARY_METHODS = ("rloo", "grpo", "ppo", "vine", "raft", "sft")
# the multi-turn regimes add GiGPO (turn-level credit from the turns of a group that start from
# the same env state: a single-turn episode has no later turn to credit); at K = 1 the runner
# skips it, as it skips every group method
_MULTI_TURN_METHODS = (*_BOUNDARY_METHODS, "gigpo")
_STEPS = {"system_prompt": None, "digits": 1}
# 2 steps of 1-digit numbers are 1,899 chains in all: at the default eval_fraction (0.2) the
# eval side would hold ~360 distinct problems, too few for a fixed evaluation list of 1,000
# distinct problems and validation tasks beside it; 0.8 of them are held out instead (~1,520
# held out, ~380 to train on)
_STEPS2 = {**_STEPS, "steps": 2, "eval_fraction": 0.8}
# 2-digit sums are 4,095 problems by meaning: 0.4 of them held out give the boundary's fixed
# evaluation list of 1,000 distinct problems (the eval side's evaluation part) and its
# validation tasks
_ARITH_2_HELD = {**_ARITH_2, "eval_fraction": 0.4}
# generated tokens per run, from the pilots (docs/boundary/pilot/): RLOO, the best RL method
# there, gained +0.046 from 240k to 480k tokens and +0.038 from 480k to 960k on arithmetic,
# still above the plateau rule's 0.02 (bench/plateau.py); twice as much again, ~8 minutes a
# run on 2 cores, is out of reach for a sweep of ~110 runs, so arithmetic runs at 960k and its
# report says it is still rising. On steps2 RLOO gained +0.015 from 240k to 480k: at the
# plateau by 240k. steps3 is not piloted yet: 480k until it is.
_ARITH_BUDGET = 960_000
_STEPS2_BUDGET = 240_000
_STEPS3_BUDGET = 480_000


def _boundary(name: str, about: str, env: str, env_kwargs: dict[str, Any], *, k: int, episodes: int, **more: Any) -> Regime:  # fmt: skip
    """One regime of the boundary preset: K x (episodes / K) prompts a step, the shared
    settings."""
    values: dict[str, Any] = dict(
        name=name, about=about, env=env, env_kwargs=env_kwargs, k=k, prompts_per_step=episodes // k,
        methods=_BOUNDARY_METHODS, warm_max_tokens=2_000_000,
        tune_lrs=_RL_LRS, tune_value_lrs=_BOUNDARY_VALUE_LRS, tune_options=_STEPS_OPTIONS,
        tune_crossed=False, checkpoint_every=1_000,
    )  # fmt: skip
    values.update(more)
    return Regime(**values)


_BOUNDARY = (
    _boundary("arithmetic-k8", "2-digit sums, worked answers, K = 8: one reward per episode",
              "forkgym/Arithmetic-v0", _ARITH_2_HELD, k=8, episodes=64, max_new_tokens=32, warm_accuracy=0.3,
              length_edges=(8, 16, 24, 32), tune_lrs=_RL_LRS, tune_options=_ARITH_OPTIONS,
              budget_tokens=_ARITH_BUDGET),
    _boundary("arithmetic-k1", "the same task at K = 1 (64 prompts a step): no group to compare within",
              "forkgym/Arithmetic-v0", _ARITH_2_HELD, k=1, episodes=64, max_new_tokens=32, warm_accuracy=0.3,
              length_edges=(8, 16, 24, 32), tune_lrs=_RL_LRS, tune_options=_ARITH_OPTIONS,
              budget_tokens=_ARITH_BUDGET, warm_name="arithmetic-k8"),
    _boundary("steps2-k8", "CheckedSteps, 2 reported steps (3 turns), K = 8: each tool reply says whether the chain holds",
              "forkgym/CheckedSteps-v0", _STEPS2, k=8, episodes=16, max_new_tokens=48,
              warm_accuracy=None, warm_max_tokens=1_200_000, length_edges=(16, 32, 48, 64),
              methods=_MULTI_TURN_METHODS, budget_tokens=_STEPS2_BUDGET),
    _boundary("steps2-k1", "the same task at K = 1: the states' values are readable, and no group exists",
              "forkgym/CheckedSteps-v0", _STEPS2, k=1, episodes=16, max_new_tokens=48,
              warm_accuracy=None, warm_max_tokens=1_200_000, length_edges=(16, 32, 48, 64),
              methods=_MULTI_TURN_METHODS, budget_tokens=_STEPS2_BUDGET, warm_name="steps2-k8",
              ceiling_prompts=16, ceiling_stride=8, vine_error_prompts=16),
    _boundary("steps3-k8", "CheckedSteps, 3 reported steps (4 turns), K = 8: a longer episode, a sparser reward",
              "forkgym/CheckedSteps-v0", {**_STEPS, "steps": 3}, k=8, episodes=16, max_new_tokens=48,
              warm_accuracy=None, warm_max_tokens=1_600_000, length_edges=(16, 32, 48, 64),
              methods=_MULTI_TURN_METHODS, budget_tokens=_STEPS3_BUDGET),
    _boundary("steps3-k1", "the longer task at K = 1",
              "forkgym/CheckedSteps-v0", {**_STEPS, "steps": 3}, k=1, episodes=16, max_new_tokens=48,
              warm_accuracy=None, warm_max_tokens=1_600_000, length_edges=(16, 32, 48, 64),
              methods=_MULTI_TURN_METHODS, budget_tokens=_STEPS3_BUDGET, warm_name="steps3-k8"),
)  # fmt: skip

PRESETS: dict[str, Preset] = {
    "smoke": Preset("smoke", (_SMOKE,), seeds=(0, 1), eval_episodes=16, tune_seeds=(100, 101)),
    "quick": Preset(
        "quick", (_QUICK,), seeds=(0, 1, 2, 3, 4), eval_episodes=200, tune_seeds=(100, 101)
    ),
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
                methods=("rloo", "grpo", "remax", "ppo", "ppo_hybrid", "raft", "sft", "gigpo"),
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
        tune_seeds=(100, 101),
    ),
    "boundary": Preset(
        "boundary",
        _BOUNDARY,
        seeds=(0, 1, 2, 3, 4),
        eval_episodes=1000,
        eval_fractions=(0.25, 0.5, 1.0),
        validation_episodes=300,
        tune_seeds=(100, 101),
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
