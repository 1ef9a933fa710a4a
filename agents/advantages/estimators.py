"""Critic-free advantage estimators: response rewards ``[P, K]`` -> detached advantages ``[P, K]``.

One signature for every estimator (docs/design.md, S11)::

    adv, stats = get_estimator("rloo")(rewards, valid)
    adv, stats = get_estimator("remax")(rewards, valid, greedy=g, greedy_valid=gv)

An estimator declares what it needs as class attributes of its registered class:
``needs_group`` (K >= 2 rollouts of each task) and ``needs_greedy`` (one greedy branch per
task, passed as ``greedy`` and ``greedy_valid`` ``[P]``). The trainer reads them, so an
estimator registered by a user gets its greedy branches without any other change.

``rewards[p, k]`` is the reward of the k-th sampled response to prompt p; ``valid[p, k]`` is
False where the verifier or environment failed (``timeout``/``error``: no reward exists, the
entry may hold NaN). Estimators never see tokens, lengths, masks or ratios; broadcasting to
tokens happens once, in the loss.

Rules every estimator keeps (docs/design.md: S2, S5-S8, S12 and invariant 2):

* invalid entries are excluded from every baseline and statistic and get advantage exactly 0,
  so an invalid entry's stored reward can never change another member's advantage;
* group estimators (``rloo``, ``grpo``, ``dr_grpo``, ``grpo_batch_std``) refuse K = 1, give 0
  to groups with fewer than 2 valid members ("under-filled") and exact zeros to all-equal
  groups (max == min over valid members, compared exactly), whatever ``eps`` is;
* arithmetic is float64 internally, so a constant group of non-dyadic rewards (eight 0.3s,
  in float32 or bfloat16) cannot leave a rounding residue that a tiny std turns into O(1);
* the output is detached and its dtype is ``promote_types(rewards.dtype, float32)``: float32
  for bfloat16/float16/float32 inputs, float64 for float64 inputs (advantages multiply float32
  log-probs; rounding them to bfloat16 would only lose precision);
* no Python loop over groups: every estimator is a handful of tensor ops over ``[P, K]``.

``stats`` is a plain ``dict[str, float]`` of counts (groups with signal, all-equal,
under-filled, invalid responses...) so nothing is dropped silently.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from forkgym.registry import Registry

__all__ = [
    "ESTIMATORS",
    "Estimator",
    "GroupRewards",
    "get_estimator",
    "register_estimator",
]

Stats = dict[str, float]

# --------------------------------------------------------------------------------------------
# Shared group statistics (float64, invalid entries excluded)


@dataclass(frozen=True)
class GroupRewards:
    """Masked per-group statistics of one batch, what an estimator computes from.

    Every tensor is float64 or bool. ``greedy`` and ``greedy_valid`` (``[P]``) are the greedy
    branch's rewards (0 where it failed) and validity, present when the caller passed them.
    """

    r: torch.Tensor  # [P, K] rewards, invalid entries replaced by 0
    valid: torch.Tensor  # [P, K]
    n: torch.Tensor  # [P] number of valid members (float64)
    total: torch.Tensor  # [P] sum of valid rewards
    mean: torch.Tensor  # [P] mean of valid rewards (0 for empty groups)
    all_equal: torch.Tensor  # [P] >= 1 valid member and max == min exactly
    filled: torch.Tensor  # [P] >= 2 valid members
    out_dtype: torch.dtype
    greedy: torch.Tensor | None = None  # [P] the greedy branch's rewards, 0 where it failed
    greedy_valid: torch.Tensor | None = None  # [P]

    @property
    def signal(self) -> torch.Tensor:
        """Groups that can carry a relative signal: >= 2 valid members, not all equal."""
        return self.filled & ~self.all_equal


def _prepare(
    rewards: torch.Tensor,
    valid: torch.Tensor | None,
    greedy: torch.Tensor | None,
    greedy_valid: torch.Tensor | None,
    *,
    need_group: bool,
    need_greedy: bool,
    name: str,
) -> GroupRewards:
    if not isinstance(rewards, torch.Tensor) or not rewards.is_floating_point():
        raise TypeError(f"rewards must be a floating-point tensor, got {type(rewards).__name__}")
    if rewards.ndim != 2:
        raise ValueError(f"rewards must be [prompt, rollout], got shape {tuple(rewards.shape)}")
    if rewards.size(1) < 1:
        raise ValueError("rewards must have at least one rollout per prompt")
    if need_group and rewards.size(1) < 2:
        raise ValueError(
            f"estimator {name!r} compares rollouts of the same prompt and needs K >= 2 "
            f"rollouts per prompt, got K = {rewards.size(1)}; use 'reinforce_ema' or 'remax' "
            "for one rollout per prompt"
        )
    r = rewards.detach().to(torch.float64)
    if valid is None:
        if torch.isnan(r).any():
            raise ValueError(
                "rewards contain NaN but no `valid` mask was given; mark infrastructure "
                "failures (timeout/error) with valid=False instead of inventing a reward"
            )
        valid = torch.ones_like(r, dtype=torch.bool)
    else:
        if valid.shape != rewards.shape:
            raise ValueError(f"valid {tuple(valid.shape)} != rewards {tuple(rewards.shape)}")
        valid = valid.detach().to(device=r.device, dtype=torch.bool)
    r = torch.where(valid, r, 0.0)
    if not torch.isfinite(r).all():
        raise ValueError("a valid entry has a non-finite reward")
    n = valid.sum(1).to(torch.float64)
    total = r.sum(1)
    mean = total / n.clamp(min=1.0)
    hi = torch.where(valid, r, -math.inf).amax(1)
    lo = torch.where(valid, r, math.inf).amin(1)
    b = gv = None
    if need_greedy:
        b, gv = _prepare_greedy(greedy, greedy_valid, rows=r.size(0), name=name, device=r.device)
    return GroupRewards(
        r=r,
        valid=valid,
        n=n,
        total=total,
        mean=mean,
        all_equal=(n >= 1) & (hi == lo),
        filled=n >= 2,
        out_dtype=torch.promote_types(rewards.dtype, torch.float32),
        greedy=b,
        greedy_valid=gv,
    )


def _prepare_greedy(
    greedy: torch.Tensor | None,
    greedy_valid: torch.Tensor | None,
    *,
    rows: int,
    name: str,
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rewards [P] float64, 0 where invalid; valid [P])`` of the greedy branches."""
    if greedy is None:
        raise ValueError(f"{name} needs the greedy branch's rewards: greedy=[P] tensor")
    b = greedy.detach().to(device=device, dtype=torch.float64).reshape(-1)
    if b.numel() != rows:
        raise ValueError(f"greedy has {b.numel()} entries for {rows} prompts")
    if greedy_valid is None:
        if torch.isnan(b).any():
            raise ValueError("greedy rewards contain NaN but no greedy_valid mask was given")
        gv = torch.ones_like(b, dtype=torch.bool)
    else:
        gv = greedy_valid.detach().to(device=b.device, dtype=torch.bool).reshape(-1)
        if gv.numel() != b.numel():
            raise ValueError("greedy_valid must have one entry per prompt")
    if not torch.isfinite(b[gv]).all():
        raise ValueError("a valid greedy entry has a non-finite reward")
    return torch.where(gv, b, 0.0), gv


def _stats(g: GroupRewards, adv: torch.Tensor, extra: dict[str, torch.Tensor | float]) -> Stats:
    """Counts and moments over valid entries (invalid advantages are exactly 0, so plain sums
    over ``adv`` are sums over valid entries); one host sync for every tensor-valued entry."""
    n_valid = g.n.sum()
    denom = n_valid.clamp(min=1.0)
    adv_mean = adv.sum() / denom
    invalid = ~g.valid
    tensors: dict[str, torch.Tensor] = {
        "responses_invalid": torch.count_nonzero(invalid),
        "groups_with_infra_failure": torch.count_nonzero(invalid.any(1)),
        "groups_under_filled": torch.count_nonzero(~g.filled),
        "groups_all_equal": torch.count_nonzero(g.filled & g.all_equal),
        "groups_with_signal": torch.count_nonzero(g.signal),
        "reward_mean": g.total.sum() / denom,
        "adv_mean": adv_mean,
        "adv_std": (adv.square().sum() / denom - adv_mean.square()).clamp(min=0.0).sqrt(),
        "adv_abs_max": adv.abs().amax() if adv.numel() else adv.new_zeros(()),
        "adv_nonzero": torch.count_nonzero(adv),
    }
    floats = {k: v for k, v in extra.items() if not isinstance(v, torch.Tensor)}
    tensors.update({k: v for k, v in extra.items() if isinstance(v, torch.Tensor)})
    keys = list(tensors)
    packed = torch.stack([tensors[k].to(torch.float64) for k in keys]).tolist()
    out = {"groups": float(g.r.size(0)), "responses": float(g.r.numel())}
    out.update(zip(keys, packed, strict=True))
    out.update({k: float(v) for k, v in floats.items()})
    return out


# --------------------------------------------------------------------------------------------
# Estimators


class Estimator:
    """The base of every estimator: validation, float64 preparation, masking and stats.

    A subclass implements :meth:`compute` and declares what it needs from the rollouts, as
    class attributes the trainer reads (never a check of the estimator's name):

    * ``needs_group``: it compares the rollouts of one task, so K >= 2 (refused otherwise);
    * ``needs_greedy``: it needs one greedy branch per task, passed as ``greedy`` and
      ``greedy_valid`` (the trainer collects those branches only for such estimators);
    * ``batch_wide``: its baseline spans the whole batch (or several steps), so under data
      parallelism each rank would compute it over its own share (refused there).
    """

    name = "base"
    needs_group: ClassVar[bool] = False
    needs_greedy: ClassVar[bool] = False
    batch_wide: ClassVar[bool] = False

    def __call__(
        self,
        rewards: torch.Tensor,
        valid: torch.Tensor | None = None,
        greedy: torch.Tensor | None = None,
        greedy_valid: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, Stats]:
        g = _prepare(
            rewards,
            valid,
            greedy,
            greedy_valid,
            need_group=self.needs_group,
            need_greedy=self.needs_greedy,
            name=self.name,
        )
        adv, extra = self.compute(g)
        adv = torch.where(g.valid, adv, 0.0)  # invalid entries: exactly 0, NaN-safe
        stats = _stats(g, adv, extra)
        return adv.to(g.out_dtype), stats

    def compute(self, g: GroupRewards) -> tuple[torch.Tensor, dict[str, torch.Tensor | float]]:
        """Advantages ``[P, K]`` (any value at invalid entries: they are zeroed) and extra
        stats (0-d tensors or floats)."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any] | None:
        """What a checkpoint keeps of it: None for an estimator that keeps nothing across
        batches (a running baseline keeps its value)."""
        return None

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


ESTIMATORS: Registry[type[Estimator]] = Registry("estimator", name_attribute="name", base=Estimator)


def register_estimator(name: str) -> Callable[[type], type]:
    """Class decorator: ``get_estimator(name, **config)`` builds ``cls(**config)``."""
    return ESTIMATORS.register(name)


def get_estimator(name: str, **config: Any) -> Estimator:
    """Build the estimator registered as ``name`` with its keyword configuration."""
    return ESTIMATORS.build(name, **config)


def _batch_mean(g: GroupRewards) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean of all valid rewards of the batch, number of valid rewards)."""
    count = g.n.sum()
    return g.total.sum() / count.clamp(min=1.0), count


def _batch_constant(g: GroupRewards) -> torch.Tensor:
    """True when every valid reward of the whole batch is the same number (exactly)."""
    vals = g.r[g.valid]
    if vals.numel() == 0:
        return torch.tensor(True)
    return vals.max() == vals.min()


@register_estimator("reinforce")
class Reinforce(Estimator):
    """No baseline: A = R. Unbiased and high-variance (S1 with b = 0)."""

    def compute(self, g):
        return g.r, {}


@register_estimator("reinforce_mean")
class ReinforceMean(Estimator):
    """A = R - mean of the whole batch, the mean INCLUDING R itself.

    Flagged (S2): a self-including mean depends on the current action, so it is not an
    action-independent baseline. For N valid responses of one prompt it equals
    (N-1)/N times the leave-one-out estimator (``stats["loo_scale"]``); across prompts it also
    mixes prompt difficulty into the baseline. Kept for comparison with the literature, not
    as a default. A batch whose valid rewards are all equal gets exact zeros.
    """

    batch_wide = True

    def compute(self, g):
        mean, count = _batch_mean(g)
        adv = torch.where(_batch_constant(g), 0.0, g.r - mean)
        scale = torch.where(count > 0, (count - 1) / count.clamp(min=1), 0.0)
        return adv, {"baseline": mean, "loo_scale": scale, "action_dependent_baseline": 1.0}


@register_estimator("reinforce_ema")
class ReinforceEMA(Estimator):
    """A = R - b, where b is an exponential moving average of EARLIER batches' mean reward.

    The baseline used for a batch is read before that batch is seen and updated only after
    its advantages are computed, so it never depends on the current actions (S1). State:
    ``baseline`` (None before the first batch: then ``init`` is used, default 0, i.e. plain
    REINFORCE for the first batch) and ``batches`` (batches that updated it). Update with
    batch mean m of valid rewards: ``b <- m`` for the first batch, then
    ``b <- decay * b + (1 - decay) * m``. Batches with no valid reward leave the state alone.
    Checkpoint with ``state_dict()`` / ``load_state_dict()``.
    """

    batch_wide = True

    def __init__(self, decay: float = 0.9, init: float = 0.0) -> None:
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"decay must be in [0, 1), got {decay}")
        self.decay = float(decay)
        self.init = float(init)
        self.baseline: float | None = None
        self.batches = 0

    def compute(self, g):
        used = self.init if self.baseline is None else self.baseline
        adv = g.r - used
        mean, count = _batch_mean(g)
        if count.item() > 0:  # update after use: the next batch sees this one, this one did not
            m = mean.item()
            self.baseline = (
                m if self.baseline is None else self.decay * self.baseline + (1.0 - self.decay) * m
            )
            self.batches += 1
        return adv, {"baseline": used, "ema_batches_seen": float(self.batches)}

    def state_dict(self) -> dict[str, Any]:
        return {"baseline": self.baseline, "batches": self.batches}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.baseline = None if state["baseline"] is None else float(state["baseline"])
        self.batches = int(state["batches"])

    def __repr__(self) -> str:
        return f"ReinforceEMA(decay={self.decay}, init={self.init}, baseline={self.baseline})"


@register_estimator("remax")
class ReMax(Estimator):
    """A = R(sampled) - R(greedy), the greedy branch started from the same state (S3).

    The baseline is one deterministic rollout per prompt, independent of the sampled actions;
    group equality plays no role (a constant sampled group still gets R - R_greedy). A prompt
    whose greedy branch failed (``greedy_valid`` False or NaN reward without a mask) has no
    baseline: its advantages are 0 and it is counted in ``greedy_invalid``. K = 1 is fine.
    """

    needs_greedy = True

    def compute(self, g):
        b, gv = g.greedy, g.greedy_valid
        adv = torch.where(gv[:, None], g.r - b[:, None], 0.0)
        return adv, {
            "greedy_invalid": (~gv).sum(),
            "greedy_reward_mean": b[gv].mean() if gv.any() else 0.0,
        }


@register_estimator("rloo")
class RLOO(Estimator):
    """A_i = R_i - mean_{j != i} R_j over the valid members of the group (S5).

    The baseline excludes the response it is applied to, so it is action-independent.
    """

    needs_group = True

    def compute(self, g):
        others = (g.total[:, None] - g.r) / (g.n[:, None] - 1).clamp(min=1.0)
        return torch.where(g.signal[:, None], g.r - others, 0.0), {}


@register_estimator("dr_grpo")
class DrGRPO(Estimator):
    """A_i = R_i - mean_j R_j: centering only, no std division (Dr. GRPO, S15).

    Equal to (n-1)/n times RLOO for a group of n valid members (S6). The length side of
    Dr. GRPO is the ``dr_grpo_constant`` reduction, not this estimator.
    """

    needs_group = True

    def compute(self, g):
        return torch.where(g.signal[:, None], g.r - g.mean[:, None], 0.0), {}


class _StdScaled(Estimator):
    """A group estimator that divides by a standard deviation, guarded by ``eps``."""

    needs_group = True

    def __init__(self, eps: float = 1e-6) -> None:
        if eps < 0:
            raise ValueError(f"eps must be >= 0, got {eps}")
        self.eps = float(eps)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(eps={self.eps})"


@register_estimator("grpo")
class GRPO(_StdScaled):
    """A_i = (R_i - mean) / std with the population std over valid members (S7).

    As in the textbook formula, the division is by ``std`` itself and a group whose std is
    ``<= eps`` gets zeros (counted in ``groups_std_below_eps``) instead of an ε-dominated
    scale. All-equal groups are detected exactly (max == min) before any arithmetic, so they
    get exact zeros whatever ``eps`` is. This is a group-relative normalised estimator, not an
    action-independent baseline: the std reweights prompts by their reward dispersion.
    """

    def compute(self, g):
        centered = torch.where(g.valid, g.r - g.mean[:, None], 0.0)
        std = (centered.square().sum(1) / g.n.clamp(min=1.0)).sqrt()
        keep = g.signal & (std > self.eps)
        adv = torch.where(keep[:, None], centered / torch.where(keep, std, 1.0)[:, None], 0.0)
        return adv, {"groups_std_below_eps": (g.signal & ~keep).sum()}


@register_estimator("grpo_batch_std")
class GRPOBatchStd(_StdScaled):
    """A_i = (R_i - group mean) / batch std: local centering, global scale.

    The std is the population std of all valid rewards of the batch (every prompt), so prompts
    are no longer reweighted by their own dispersion. All-equal and under-filled groups get
    exact zeros; if the batch std is ``<= eps`` every advantage is 0 (``batch_std_below_eps``).
    """

    batch_wide = True

    def compute(self, g):
        mean, count = _batch_mean(g)
        dev = torch.where(g.valid, g.r - mean, 0.0)
        std = (dev.square().sum() / count.clamp(min=1.0)).sqrt()
        ok = std > self.eps
        scale = torch.where(ok, std, 1.0)
        adv = torch.where(g.signal[:, None] & ok, (g.r - g.mean[:, None]) / scale, 0.0)
        return adv, {"batch_std": std, "batch_std_below_eps": (~ok).to(torch.float64)}


def _batch_normalised(
    g: GroupRewards, dev: torch.Tensor, eps: float
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``dev`` over the valid entries, centred by its batch mean and divided by its batch
    population std (0 everywhere when that std is ``<= eps``)."""
    count = g.n.sum()
    dev = torch.where(g.valid, dev, 0.0)
    mean = dev.sum() / count.clamp(min=1.0)
    centred = torch.where(g.valid, dev - mean, 0.0)
    std = (centred.square().sum() / count.clamp(min=1.0)).sqrt()
    ok = std > eps
    adv = torch.where(ok, centred / torch.where(ok, std, 1.0), 0.0)
    return adv, {"batch_std": std, "batch_std_below_eps": (~ok).to(torch.float64)}


@register_estimator("reinforce_pp")
class ReinforcePP(_StdScaled):
    """REINFORCE++ (Hu et al. 2025, arXiv:2501.03262): A = (R - batch mean) / batch std.

    Global advantage normalisation, no per-prompt baseline: every valid response of the batch
    enters one mean and one population std. Its token-level KL penalty in the reward is
    ``kl_in_reward: true`` here; with an outcome reward and no discount, the return of every
    token is the response's R, so the advantage is per response. Batch std ``<= eps`` gives 0
    everywhere (``batch_std_below_eps``).
    """

    needs_group = False
    batch_wide = True

    def compute(self, g):
        return _batch_normalised(g, g.r, self.eps)


@register_estimator("reinforce_pp_baseline")
class ReinforcePPBaseline(_StdScaled):
    """REINFORCE++-baseline (arXiv:2501.03262): A' = R - group mean, then
    A = (A' - batch mean of A') / batch std of A'.

    Not ``grpo_batch_std``, which divides by the std of the raw rewards: here the scale is the
    spread left after each prompt's mean is removed, so easy and hard prompts do not inflate
    it. All-equal and under-filled groups get exact zeros (their A' is 0, and they count in
    the batch statistics as the paper's zeros do).
    """

    batch_wide = True

    def compute(self, g):
        dev = torch.where(g.signal[:, None], g.r - g.mean[:, None], 0.0)
        adv, stats = _batch_normalised(g, dev, self.eps)
        return torch.where(g.signal[:, None], adv, 0.0), stats
