"""Token-level policy losses behind one registry and one signature (docs/design.md, S13, S16-S18).

::

    loss_fn = get_loss("ppo_clip", eps_low=0.2, eps_high=0.28, reduction="token_mean")
    loss, metrics = loss_fn(logprobs, old_logprobs, advantages, mask,
                            ref_logprobs=None, entropy=None, normaliser=step_normaliser)

* ``logprobs [B, T]``: current policy, with grad; ``old_logprobs [B, T]``: the behaviour
  policy that generated the tokens (detached here); ``ref_logprobs [B, T]``: optional
  reference policy for a KL term; ``entropy [B, T]``: optional, reported only.
* ``advantages [B]``: response-level and detached (a tensor that requires grad is refused);
  they are broadcast to tokens here and only here, under the action mask ``[B, T]``.
  Token-level ``[B, T]`` advantages are accepted only for a learned critic's GAE (S19,
  :mod:`forkgym.agents.advantages.critic`), and not by ``gspo``, whose ratio is per response.
* Every loss is ``reduce(term[i, t])`` with a named reduction
  (:mod:`forkgym.agents.learner.reductions`). Pass the step's :class:`Normaliser` when the step has
  more than one micro-batch or rank; without one, the counts of this call are used (refused
  under an initialised multi-rank ``torch.distributed``, where that would be a silent bug).
* ``metrics`` is a dict of floats: token/sequence counts, ratio statistics, clip fractions by
  direction (``clip_frac_low``: A < 0 and the ratio under 1 - eps_low; ``clip_frac_high``:
  A > 0 and the ratio above 1 + eps_high; ``clip_frac_dual``: A < 0 and the dual clip
  active), KL and entropy when given. Counts are local to the call.

KL to a reference is off by default (``kl_coef=0``). ``kl_coef > 0`` adds
``kl_coef * k(logprobs, ref)`` to every token term (the "KL in the loss" convention of GRPO);
:func:`kl_reward_penalty` is the other convention (subtracted from the response reward before
the estimator). ``k1``, ``k2``, ``k3`` are Schulman's estimators of KL(pi || pi_ref) from
samples of pi: with ``d = log pi - log pi_ref``, ``k1 = d``, ``k2 = d^2 / 2``,
``k3 = exp(-d) - 1 + d`` (unbiased, always >= 0).

Padding may hold anything (NaN, inf): masked positions are selected away with
``torch.where`` before any arithmetic, so they reach neither the loss nor the gradient.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from forkgym.registry import Registry

from ..distributed import World
from .reductions import REDUCTIONS, Normaliser, build_normaliser

if TYPE_CHECKING:
    from ..run.config import TrainConfig

__all__ = [
    "KL_ESTIMATORS",
    "LOSSES",
    "PolicyLoss",
    "get_loss",
    "kl_estimate",
    "kl_reward_penalty",
    "register_loss",
]

KL_ESTIMATORS: tuple[str, ...] = ("k1", "k2", "k3")
Metrics = dict[str, float]


def register_loss(name: str) -> Callable[[type[PolicyLoss]], type[PolicyLoss]]:
    """Class decorator: ``get_loss(name, **config)`` builds ``cls(**config)``."""
    return LOSSES.register(name)


def get_loss(name: str, **config: Any) -> PolicyLoss:
    """Build the loss registered as ``name`` with its keyword configuration."""
    return LOSSES.build(name, **config)


# --------------------------------------------------------------------------------------------
# KL estimators


def _masked_diff(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``a - b`` on action tokens, exactly 0 (with zero gradient) elsewhere, NaN-safe."""
    return (a - b).masked_fill_(~mask, 0.0)


def kl_estimate(
    logprobs: torch.Tensor, ref_logprobs: torch.Tensor, mask: torch.Tensor, kind: str = "k3"
) -> torch.Tensor:
    """Per-token estimate of KL(pi || pi_ref) from tokens sampled by pi; 0 off the mask."""
    if kind not in KL_ESTIMATORS:
        raise ValueError(f"unknown KL estimator {kind!r}; expected one of {KL_ESTIMATORS}")
    mask = _bool_mask(mask)
    d = _masked_diff(logprobs, ref_logprobs.detach(), mask)
    if kind == "k1":
        return d
    if kind == "k2":
        return 0.5 * d.square()
    return torch.expm1(-d) + d  # exp(-d) - 1 + d, accurate near d = 0


def kl_reward_penalty(
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    mask: torch.Tensor,
    *,
    coef: float,
    kind: str = "k1",
) -> torch.Tensor:
    """``coef * sum_t k(t)`` per response ``[B]``, detached: subtract it from the rewards.

    The "KL in the reward" convention: the penalty joins the response reward before the
    estimator, so it is centred and scaled with it. Use the behaviour policy's log-probs.
    """
    return (coef * kl_estimate(logprobs, ref_logprobs, mask, kind).sum(1)).detach()


# --------------------------------------------------------------------------------------------
# The loss base class


def _bool_mask(mask: torch.Tensor) -> torch.Tensor:
    return mask if mask.dtype == torch.bool else mask != 0


class PolicyLoss:
    """Validation, broadcasting, KL, reduction and metrics around :meth:`policy_terms`.

    Subclasses implement ``policy_terms`` (per-token terms of the NEGATED surrogate, so that
    the loss is minimised) and name their paper's reduction in ``default_reduction``.
    """

    name = "base"
    default_reduction = "token_mean"
    token_advantages: ClassVar[bool] = True  # also accepts [B, T] advantages (a critic's GAE)

    def __init__(
        self,
        *,
        reduction: str | None = None,
        max_episode_tokens: int | None = None,
        kl_coef: float = 0.0,
        kl_estimator: str = "k3",
    ) -> None:
        self.reduction = reduction or self.default_reduction
        if self.reduction not in REDUCTIONS:
            raise ValueError(f"unknown reduction {self.reduction!r}; expected one of {REDUCTIONS}")
        if self.reduction == "dr_grpo_constant" and not max_episode_tokens:
            raise ValueError("reduction 'dr_grpo_constant' needs max_episode_tokens")
        if kl_estimator not in KL_ESTIMATORS:
            raise ValueError(f"unknown KL estimator {kl_estimator!r}; expected {KL_ESTIMATORS}")
        if kl_coef < 0:
            raise ValueError(f"kl_coef must be >= 0, got {kl_coef}")
        self.max_episode_tokens = max_episode_tokens
        self.kl_coef = float(kl_coef)
        self.kl_estimator = kl_estimator

    # keys of the training configuration in their own right, never ``loss_kwargs``
    CONFIG_KEYS = frozenset({"reduction", "kl_coef", "kl_estimator", "max_episode_tokens"})

    @classmethod
    def check(cls, config: TrainConfig) -> list[str]:
        """What is wrong with ``config``'s ``loss_kwargs`` for this loss (``[]``: nothing)."""
        options = config.loss_kwargs
        if not isinstance(options, dict):
            return [f"loss_kwargs must be a mapping, got {options!r}"]
        if reserved := sorted(set(options) & cls.CONFIG_KEYS):
            return [
                f"loss_kwargs {reserved}: set them as config keys of their own "
                "(reduction, kl_coef, kl_estimator; the token budget comes from max_new_tokens)"
            ]
        try:
            cls(**options)
        except (TypeError, ValueError) as exc:
            return [f"loss_kwargs={options!r}: {exc}"]
        return []

    # -- subclasses ---------------------------------------------------------------------------

    def policy_terms(
        self,
        logprobs: torch.Tensor,
        log_ratio: torch.Tensor,
        adv: torch.Tensor,
        mask: torch.Tensor,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Per-token loss terms ``[B, T]`` and metric tensors (means over action tokens).

        ``logprobs`` is raw (padding may hold anything); ``log_ratio`` is 0 off the mask;
        ``adv`` is ``[B, 1]`` (or ``[B, T]``, 0 off the mask). A subclass that computes the
        token ratio ``exp(log_ratio)`` returns it as ``extra["ratio"]`` for the metrics. Terms MUST be exactly 0 off the mask (and NaN-free there): the reduction
        sums them without another masking pass. Metric tensors: bool ones (broadcastable
        to ``[B, T]``) are reported as fractions of action tokens, float ``[B, T]`` ones as
        means over action tokens, 0-d ones as they are.
        """
        raise NotImplementedError

    # -- the public call ----------------------------------------------------------------------

    def terms(
        self,
        logprobs: torch.Tensor,
        old_logprobs: torch.Tensor,
        advantages: torch.Tensor,
        mask: torch.Tensor,
        *,
        ref_logprobs: torch.Tensor | None = None,
        is_weights: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """``(terms [B, T] with KL if on, bool mask, metric tensors)``, before reduction.

        Terms are exactly 0 off the mask. Diagnostics use this to stratify per-response
        losses (:func:`forkgym.agents.learner.diagnostics.sequence_losses`). ``is_weights [B, T]``
        (detached, >= 0) scales each token's policy term, not its KL term: the train/serve
        corrections of :mod:`forkgym.agents.learner.drift`.
        """
        mask = self._validate(logprobs, old_logprobs, advantages, mask, ref_logprobs)
        if is_weights is not None and is_weights.shape != logprobs.shape:
            raise ValueError(
                f"is_weights {tuple(is_weights.shape)} != logprobs {tuple(logprobs.shape)}"
            )
        log_ratio = _masked_diff(logprobs, old_logprobs.detach(), mask)
        adv = advantages.to(logprobs.dtype)
        adv = adv.masked_fill(~mask, 0.0) if adv.ndim == 2 else adv[:, None]
        terms, extra = self.policy_terms(logprobs, log_ratio, adv, mask)
        if is_weights is not None:  # 0 off the mask already: terms stay exactly 0 there
            terms = terms * torch.where(mask, is_weights.detach().to(terms.dtype), 0.0)
        if "ratio" not in extra:
            extra["ratio"] = log_ratio.detach().exp()
        if ref_logprobs is not None:
            kl = kl_estimate(logprobs, ref_logprobs, mask, self.kl_estimator)
            extra["kl"] = kl
            if self.kl_coef > 0:
                extra["policy_term"] = terms
                terms = terms + self.kl_coef * kl
        return terms, mask, extra

    def __call__(
        self,
        logprobs: torch.Tensor,
        old_logprobs: torch.Tensor,
        advantages: torch.Tensor,
        mask: torch.Tensor,
        *,
        ref_logprobs: torch.Tensor | None = None,
        entropy: torch.Tensor | None = None,
        normaliser: Normaliser | None = None,
        is_weights: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, Metrics]:
        """``(loss scalar, metrics)`` for one micro-batch; see the module docstring."""
        terms, bmask, extra = self.terms(
            logprobs, old_logprobs, advantages, mask, ref_logprobs=ref_logprobs,
            is_weights=is_weights,
        )  # fmt: skip
        return self.reduce(terms, bmask, extra, normaliser=normaliser, entropy=entropy)

    def reduce(
        self,
        terms: torch.Tensor,
        mask: torch.Tensor,
        extra: dict[str, torch.Tensor],
        *,
        normaliser: Normaliser | None = None,
        entropy: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, Metrics]:
        """The second half of a call: :meth:`terms`' output to ``(loss scalar, metrics)``.

        Split out so a caller can also keep the terms (per-response loss diagnostics)."""
        norm = self._normaliser(normaliser, mask)
        loss = norm.reduce(terms, mask, premasked=True)
        return loss, self._metrics(loss, terms, mask, extra, norm, entropy)

    # -- helpers ------------------------------------------------------------------------------

    def _normaliser(self, normaliser: Normaliser | None, mask: torch.Tensor) -> Normaliser:
        if normaliser is None:
            if World.current().size > 1:
                raise ValueError(
                    "under data parallelism pass normaliser=build_normaliser(...), built once "
                    "per optimizer step over all micro-batches and ranks"
                )
            return build_normaliser(
                self.reduction, mask, max_episode_tokens=self.max_episode_tokens, distributed=False
            )
        if normaliser.reduction != self.reduction:
            raise ValueError(
                f"loss {self.name!r} is configured for reduction {self.reduction!r} but the "
                f"normaliser was built for {normaliser.reduction!r}"
            )
        return normaliser

    def _validate(self, logprobs, old_logprobs, advantages, mask, ref_logprobs) -> torch.Tensor:
        if logprobs.ndim != 2:
            raise ValueError(f"logprobs must be [batch, tokens], got {tuple(logprobs.shape)}")
        for label, t in (("old_logprobs", old_logprobs), ("mask", mask), ("ref", ref_logprobs)):
            if t is not None and t.shape != logprobs.shape:
                raise ValueError(f"{label} {tuple(t.shape)} != logprobs {tuple(logprobs.shape)}")
        if advantages.shape != logprobs.shape[:1] and (
            not self.token_advantages or advantages.shape != logprobs.shape
        ):
            raise ValueError(
                f"advantages must be response-level [B] = [{logprobs.size(0)}], got "
                f"{tuple(advantages.shape)}; broadcasting to tokens happens in the loss"
                + ("" if self.token_advantages else f" (and {self.name!r} needs them per response)")
            )
        if advantages.requires_grad:
            raise ValueError("advantages must be detached (estimators return detached tensors)")
        return _bool_mask(mask)

    def _metrics(self, loss, terms, mask, extra, norm, entropy) -> Metrics:
        """Scalars for a logger, one host sync; fractions are bool counts (no float copies)."""
        n_tok = torch.count_nonzero(mask)
        denom = n_tok.clamp(min=1).to(torch.float64)

        def mean(x: torch.Tensor) -> torch.Tensor:
            if x.dtype == torch.bool:
                return torch.count_nonzero(x & mask) / denom
            return torch.where(mask, x.detach(), 0.0).sum(dtype=torch.float64) / denom

        r = extra.pop("ratio").detach()  # exactly 1 off the mask
        values: dict[str, torch.Tensor | float] = {
            "loss": loss.detach(),
            "tokens": n_tok,
            "sequences": torch.count_nonzero(mask.any(1)),
        }
        if n_tok:
            off = mask.numel() - n_tok
            values["ratio_mean"] = (r.sum(dtype=torch.float64) - off) / denom
            masked = torch.where(mask, r, torch.inf)
            values["ratio_min"] = masked.amin()
            values["ratio_max"] = masked.masked_fill_(~mask, -torch.inf).amax()
        else:
            values.update(ratio_mean=1.0, ratio_min=1.0, ratio_max=1.0)
        if "policy_term" in extra:
            values["policy_loss"] = norm.reduce(
                extra.pop("policy_term").detach(), mask, premasked=True
            )
        if "kl" in extra:
            values["kl"] = extra.pop("kl").detach().sum(dtype=torch.float64) / denom  # 0 off mask
        if entropy is not None:
            values["entropy"] = mean(entropy)
        for key, val in extra.items():
            values[key] = val.detach() if val.ndim == 0 else mean(val)
        keys = list(values)
        packed = torch.stack(
            [torch.as_tensor(values[k], dtype=torch.float64, device=terms.device) for k in keys]
        )
        return dict(zip(keys, packed.tolist(), strict=True))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(reduction={self.reduction!r}, kl_coef={self.kl_coef})"


# --------------------------------------------------------------------------------------------
# Losses


LOSSES: Registry[type[PolicyLoss]] = Registry("loss", name_attribute="name", base=PolicyLoss)


@register_loss("vanilla_pg")
class VanillaPG(PolicyLoss):
    """REINFORCE: term = -A * log pi(y_t). On-policy; the gradient is -A * grad log pi.

    No importance weight: with stale data use ``ppo_clip``. Ratios are still reported so
    staleness is visible.
    """

    default_reduction = "seq_sum"

    def policy_terms(self, logprobs, log_ratio, adv, mask):
        return logprobs.masked_fill(~mask, 0.0).mul_(-adv), {}


@register_loss("ppo_clip")
class PPOClip(PolicyLoss):
    """PPO's clipped surrogate with asymmetric ε (DAPO clip-higher, S16) and optional dual clip.

    ``r = exp(log pi - log pi_old)`` per token;
    ``surr = min(r A, clip(r, 1 - eps_low, 1 + eps_high) A)``; with ``dual_clip = c > 1``
    (Ye et al. 2020) negative advantages are further bounded: ``surr = max(surr, c A)`` for
    A < 0. term = -surr. DAPO's defaults are eps_low 0.2, eps_high 0.28 with ``token_mean``.
    """

    default_reduction = "token_mean"

    def __init__(
        self,
        eps_low: float = 0.2,
        eps_high: float = 0.28,
        dual_clip: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not (0 <= eps_low < 1 and eps_high >= 0):
            raise ValueError(f"need 0 <= eps_low < 1 and eps_high >= 0, got {eps_low}, {eps_high}")
        if dual_clip is not None and dual_clip <= 1:
            raise ValueError(f"dual_clip must be > 1, got {dual_clip}")
        self.eps_low, self.eps_high, self.dual_clip = float(eps_low), float(eps_high), dual_clip

    def policy_terms(self, logprobs, log_ratio, adv, mask):
        # min(r A, clip(r) A) written with detached gates: a token whose clipped branch wins
        # ("frozen") contributes the constant clip(r) A (or c A under the dual clip) and no
        # gradient; a "live" token contributes r A. Same value and gradient as the min/clamp
        # form, without autograd through minimum/clamp (the bulk of the backward time).
        ratio = log_ratio.exp()
        rd = ratio.detach()
        lo, hi = 1.0 - self.eps_low, 1.0 + self.eps_high
        pos, neg = adv > 0, adv < 0
        low, high = neg & (rd < lo), pos & (rd > hi)
        frozen_value = rd.clamp(lo, hi)
        frozen = low | high
        extra = {"ratio": ratio, "clip_frac_low": low, "clip_frac_high": high}
        if self.dual_clip is None:
            extra["clip_frac_dual"] = torch.zeros((), dtype=rd.dtype)  # off: never active
        else:
            dual = neg & (rd > self.dual_clip)
            frozen_value = frozen_value.masked_fill_(dual, self.dual_clip)
            frozen = frozen | dual
            extra["clip_frac_dual"] = dual
        dead = ~mask | frozen
        frozen_value = frozen_value.masked_fill_(~(mask & frozen), 0.0)
        # in place where autograd allows: full-size temporaries dominate the CPU time
        return ratio.masked_fill(dead, 0.0).add_(frozen_value).mul_(-adv), extra


@register_loss("gspo")
class GSPO(PolicyLoss):
    """GSPO (Zheng et al. 2025, arXiv:2507.18071): sequence ratio, sequence clipping (S17).

    ``s_i = exp(mean_t (log pi - log pi_old))`` over the action tokens of response i (the
    length-normalised sequence ratio); ``term_i = -min(s_i A_i, clip(s_i, 1-eps_low,
    1+eps_high) A_i)``, the same for every action token of i, so the paper's objective
    ``(1/G) sum_i term_i`` is the ``seq_mean_token_mean`` reduction (the default). Clipping
    keeps or drops whole responses. ``token_level=True`` is GSPO-token
    (``s_it = sg[s_i] * pi_t / sg[pi_t]``), equal in value and gradient here because the
    advantages are response-level. Paper defaults: eps 3e-4 / 4e-4.
    """

    default_reduction = "seq_mean_token_mean"
    token_advantages = False  # a sequence ratio clips whole responses: one advantage each

    def __init__(
        self,
        eps_low: float = 3e-4,
        eps_high: float = 4e-4,
        token_level: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not (0 <= eps_low < 1 and eps_high >= 0):
            raise ValueError(f"need 0 <= eps_low < 1 and eps_high >= 0, got {eps_low}, {eps_high}")
        self.eps_low, self.eps_high, self.token_level = float(eps_low), float(eps_high), token_level

    def policy_terms(self, logprobs, log_ratio, adv, mask):
        lengths = torch.count_nonzero(mask, dim=1)[:, None].clamp(min=1).to(log_ratio.dtype)
        s = (log_ratio.sum(1, keepdim=True) / lengths).exp()  # [B, 1]
        if self.token_level:
            # value s_i, gradient of the token's own log-prob (log_ratio: 0 and inert off mask)
            s = s.detach() * (log_ratio - log_ratio.detach()).exp()
        lo, hi = 1.0 - self.eps_low, 1.0 + self.eps_high
        surr = torch.minimum(s * adv, s.clamp(lo, hi) * adv)
        terms = torch.where(mask, -surr, 0.0)
        sd = s.detach()
        low, high = (adv < 0) & (sd < lo), (adv > 0) & (sd > hi)
        has = mask.any(1, keepdim=True)
        n_seq = has.sum().clamp(min=1)
        extra = {
            "clip_frac_low": low,  # [B, 1]: token-weighted fraction
            "clip_frac_high": high,
            "clip_frac_low_seq": (low & has).sum() / n_seq,  # response-weighted
            "clip_frac_high_seq": (high & has).sum() / n_seq,
            "seq_ratio_mean": (sd * has).sum() / n_seq,
        }
        return terms, extra


@register_loss("sapo")
class SAPO(PolicyLoss):
    """SAPO (Gao et al. 2025, arXiv:2511.20347): a smooth gate instead of a hard clip (S18).

    Per token ``r = pi / pi_old`` and ``f(r) = (4 / tau) * sigmoid(tau * (r - 1))`` with
    ``tau = tau_pos`` for A > 0 and ``tau_neg`` otherwise; term = -f(r) A. The gradient
    weight ``f'(r) = 4 sigmoid(.)(1 - sigmoid(.))`` is 1 on-policy (SAPO = policy gradient
    at r = 1) and decays smoothly as a token drifts off-policy, token by token, instead of
    zeroing a whole band (token-adaptive); for a response whose tokens drift together it acts
    like a sequence gate (sequence-coherent). Paper: ``(1/G) sum_i (1/|y_i|) sum_t``, i.e.
    ``seq_mean_token_mean``; defaults tau_pos 1.0, tau_neg 1.05.
    """

    default_reduction = "seq_mean_token_mean"

    def __init__(self, tau_pos: float = 1.0, tau_neg: float = 1.05, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if tau_pos <= 0 or tau_neg <= 0:
            raise ValueError(f"temperatures must be > 0, got {tau_pos}, {tau_neg}")
        self.tau_pos, self.tau_neg = float(tau_pos), float(tau_neg)

    def policy_terms(self, logprobs, log_ratio, adv, mask):
        r = log_ratio.exp()
        tau = torch.where(adv > 0, r.new_tensor(self.tau_pos), r.new_tensor(self.tau_neg))
        sig = torch.sigmoid(tau * (r - 1.0))
        weight = (4.0 * sig * (1.0 - sig)).detach()
        terms = (-(4.0 / tau) * sig * adv).masked_fill(~mask, 0.0)
        return terms, {"ratio": r, "gate_weight": weight, "gate_weight_below_half": weight < 0.5}
