"""The methods a benchmark compares: named training configs, one registry.

A method is a set of :class:`~forkgym.agents.run.config.TrainConfig` values laid over a regime's
shared settings (model, task, K, batch, learning rate, budget), or one of the two runs that
are not the RL trainer: ``sft`` (supervised steps on gold demonstrations) and ``trl_grpo``
(TRL's GRPOTrainer on the same model and tasks, with the ``bench`` extra). Any method name
takes an ``@reduction`` suffix that overrides its reduction, so ``grpo@seq_mean_token_mean``
is GRPO under another normalisation; the reductions comparison is three such names.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from forkgym.agents.learner.reductions import REDUCTIONS
from forkgym.registry import Registry

__all__ = ["METHODS", "VINE", "Method", "resolve_method"]


@dataclass(frozen=True)
class Method:
    name: str
    about: str
    kind: str = "rl"  # "rl" (forkgym's trainer), "sft" (gold demonstrations), "trl"
    overrides: dict[str, Any] = field(default_factory=dict)
    needs_group: bool = False  # compares the K responses of a prompt: needs K >= 2


METHODS: Registry[Method] = Registry("benchmark method")


def _add(name: str, about: str, *, kind: str = "rl", group: bool = False, **overrides: Any) -> None:
    METHODS.register(name, Method(name, about, kind, overrides, group))


_add("reinforce", "REINFORCE, no baseline", estimator="reinforce")
_add("reinforce_ema", "REINFORCE with a running-mean (EMA) baseline", estimator="reinforce_ema")
_add("reinforce_mean", "REINFORCE with the batch-mean baseline", estimator="reinforce_mean")
_add("remax", "ReMax: the greedy response's reward as baseline", estimator="remax")
_add("rloo", "RLOO: leave-one-out group baseline", estimator="rloo", group=True)
_add("grpo", "GRPO: group mean and std", estimator="grpo", group=True)
_add(
    "dr_grpo",
    "Dr. GRPO: group mean, no std, constant normaliser",
    estimator="dr_grpo",
    reduction="dr_grpo_constant",
    group=True,
)
_add(
    "dapo",
    "DAPO: GRPO advantages, clip-higher, dynamic sampling, token-mean, soft overlong penalty",
    estimator="grpo",
    loss_kwargs={"eps_low": 0.2, "eps_high": 0.28},
    reduction="token_mean",
    dynamic_sampling=True,
    overlong_buffer=4,
    group=True,
)
_add("gspo", "GSPO: sequence-level ratio and clipping", estimator="grpo", loss="gspo", group=True)
_add(
    "sapo",
    "SAPO: soft adaptive gate instead of the clip",
    estimator="grpo",
    loss="sapo",
    group=True,
)
# PPO's critic at its best shot: pretrained for 6 steps on the warm start's own rollouts (the
# policy frozen, as VC-PPO pretrains its value model; those tokens count in the budget), two
# epochs of its own per step, its own learning rate (swept: `tune_value_lrs`), whitened
# advantages
_CRITIC = {"lam": 0.95, "value_lam": 1.0, "value_warmup_steps": 6, "value_epochs": 2, "normalize_advantages": True}  # fmt: skip
_add(
    "ppo",
    "PPO with a learned critic (a separate value model, GAE over action tokens)",
    algorithm="ppo",
    algorithm_kwargs=_CRITIC,
)
_add(
    "ppo_shared",
    "PPO with a value head on the policy's trunk",
    algorithm="ppo",
    algorithm_kwargs={**_CRITIC, "value_model": "shared"},
)
_add(
    "ppo_hybrid",
    "critic + group centring: GAE advantages centred by the group's leave-one-out mean",
    algorithm="ppo",
    algorithm_kwargs={**_CRITIC, "group_centering": "loo", "normalize_advantages": False},
    group=True,
)
# VinePPO's values: 4 continuations from every turn's start and every 16 tokens inside a turn
# (the first state, the prompt, is shared by a group's branches and valued once); every
# continuation token counts in the budget
VINE = {"rollouts": 4, "chunk": 16}
_add(
    "vine",
    "VinePPO: segment advantages from Monte Carlo values of exact forks (no critic, no group)",
    algorithm="vine",
    algorithm_kwargs=VINE,
)
# GiGPO: the episode level is GRPO's; the step level compares the turns of a group's branches
# that start from the same exact env state (TextEnv.state_key), so it needs K >= 2
_add(
    "gigpo",
    "GiGPO: GRPO's episode advantage plus a turn-level one relative to the group's turns from the same exact env state",
    algorithm="gigpo",
    estimator="grpo",
    group=True,
)
_add(
    "raft",
    "rejection-sampling fine-tuning: a supervised step on the verified-correct samples",
    algorithm="raft",
    loss="vanilla_pg",
    reduction="token_mean",
)
_add("sft", "supervised steps on gold demonstrations (no generation)", kind="sft")
_add("trl_grpo", "TRL's GRPOTrainer on the same model, tasks, reward, K, batch and lr", kind="trl", group=True)  # fmt: skip


def resolve_method(spec: str) -> Method:
    """``name`` or ``name@reduction``; a clear error naming what exists otherwise."""
    name, _, reduction = spec.partition("@")
    method = METHODS.lookup(name)
    if not reduction:
        return method
    if method.kind != "rl":
        raise ValueError(f"method {name!r} has no reduction to override")
    if reduction not in REDUCTIONS:
        raise ValueError(f"unknown reduction {reduction!r} in {spec!r}; expected one of {REDUCTIONS}")  # fmt: skip
    return replace(method, name=spec, overrides={**method.overrides, "reduction": reduction})
