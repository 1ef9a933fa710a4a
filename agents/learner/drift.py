"""Train/serve drift: how far the generating engine's log-probs are from the trainer's, and the
corrections that keep the update unbiased when they differ.

With a separate engine (vLLM) the behaviour log-probs that come back with each sample are
the engine's numerics (other kernels, fused layers, another precision), not the trainer's, even
right after a weight sync. Per step, over the sampled (action) tokens, with
``r = exp(log pi_trainer - log pi_engine)`` the raw importance ratio (before any correction):

* ``drift/logprob_abs_mean``, ``drift/logprob_abs_max``: ``|log pi_trainer - log pi_engine|``;
* ``drift/ratio_mean``, ``drift/ratio_min``, ``drift/ratio_max``: token ratios;
* ``drift/seq_ratio_min``, ``drift/seq_ratio_max``: per-sequence ratio (product over tokens);
* ``drift/geo_ratio_min``, ``drift/geo_ratio_max``: its geometric mean per sequence.

Corrections (:data:`CORRECTIONS`, any combination; they multiply into one per-token weight
that scales each token's policy term, never the KL term):

* ``tis``: token-level truncated importance sampling, weight ``min(r, tis_clamp)``;
* ``seq_mask``: weight 0 for every token of a sequence whose ratio leaves ``seq_band``;
* ``geo_mask``: the same with the geometric-mean ratio and ``geo_band`` (length-fair).

With a correction on, the loss's own ratio is anchored at the trainer's recomputed log-probs
(so the PPO clip sees the trainer's numerics) and the engine's enter only through the weight.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["CORRECTIONS", "correction_weights", "drift_metrics", "is_band"]

CORRECTIONS: tuple[str, ...] = ("tis", "seq_mask", "geo_mask")


def _log_ratios(
    trainer: torch.Tensor, engine: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Token log-ratios (0 off the mask, float64), their per-row sums and per-row counts."""
    if trainer.shape != engine.shape or trainer.shape != mask.shape:
        raise ValueError(
            f"shapes differ: trainer {tuple(trainer.shape)}, engine {tuple(engine.shape)}, "
            f"mask {tuple(mask.shape)}"
        )
    mask = mask.bool()
    diff = torch.where(mask, trainer.double() - engine.double(), 0.0)
    return diff, diff.sum(1), mask.sum(1)


def drift_metrics(
    trainer_logprobs: torch.Tensor, engine_logprobs: torch.Tensor, mask: torch.Tensor
) -> dict[str, float]:
    """The raw drift statistics above over ``mask``'s tokens (``[N, T]`` each)."""
    diff, seq, counts = _log_ratios(trainer_logprobs, engine_logprobs, mask)
    mask = mask.bool()
    n = int(mask.sum())
    if n == 0:
        return {"drift/tokens": 0.0}
    on = diff[mask]
    ratio = on.exp()
    rows = counts > 0
    seq_ratio = seq[rows].exp()
    geo = (seq[rows] / counts[rows]).exp()
    return {
        "drift/tokens": float(n),
        "drift/logprob_abs_mean": float(on.abs().mean()),
        "drift/logprob_abs_max": float(on.abs().max()),
        "drift/ratio_mean": float(ratio.mean()),
        "drift/ratio_min": float(ratio.min()),
        "drift/ratio_max": float(ratio.max()),
        "drift/seq_ratio_min": float(seq_ratio.min()),
        "drift/seq_ratio_max": float(seq_ratio.max()),
        "drift/geo_ratio_min": float(geo.min()),
        "drift/geo_ratio_max": float(geo.max()),
    }


def is_band(band: Sequence[float]) -> bool:
    """``[low, high]`` with ``0 <= low <= 1 <= high``: a band around a ratio of 1."""
    return len(band) == 2 and 0 <= band[0] <= 1 <= band[1]


def _check_band(name: str, band: Sequence[float]) -> tuple[float, float]:
    if not is_band(band):
        raise ValueError(f"{name} must be [low, high] with 0 <= low <= 1 <= high, got {band}")
    return float(band[0]), float(band[1])


def correction_weights(
    trainer_logprobs: torch.Tensor,
    engine_logprobs: torch.Tensor,
    mask: torch.Tensor,
    corrections: Sequence[str],
    *,
    tis_clamp: float = 2.0,
    seq_band: Sequence[float] = (0.5, 2.0),
    geo_band: Sequence[float] = (0.99, 1.01),
) -> tuple[torch.Tensor, dict[str, float]]:
    """``[N, T]`` float32 per-token weights (1 where nothing applies, 0 off the mask) and the
    share of tokens each correction changed."""
    unknown = [c for c in corrections if c not in CORRECTIONS]
    if unknown:
        raise ValueError(f"unknown rollout corrections {unknown}; expected any of {CORRECTIONS}")
    if not tis_clamp >= 1:
        raise ValueError(f"tis_clamp must be >= 1, got {tis_clamp}")
    seq_lo, seq_hi = _check_band("seq_band", seq_band)
    geo_lo, geo_hi = _check_band("geo_band", geo_band)
    diff, seq, counts = _log_ratios(trainer_logprobs, engine_logprobs, mask)
    mask = mask.bool()
    weights = torch.where(mask, 1.0, 0.0).double()
    n = max(int(mask.sum()), 1)
    metrics: dict[str, float] = {}
    if "tis" in corrections:
        ratio = diff.exp()
        clipped = mask & (ratio > tis_clamp)
        weights = weights * torch.where(mask, ratio.clamp(max=tis_clamp), 0.0)
        metrics["correction/tis_clipped_frac"] = float(clipped.sum()) / n
    keep = torch.ones(len(counts), dtype=torch.bool)
    if "seq_mask" in corrections:
        log_lo, log_hi = torch.tensor([seq_lo, seq_hi], dtype=torch.float64).log()
        keep &= (seq >= log_lo) & (seq <= log_hi)
    if "geo_mask" in corrections:
        log_lo, log_hi = torch.tensor([geo_lo, geo_hi], dtype=torch.float64).log()
        geo = seq / counts.clamp(min=1)
        keep &= (geo >= log_lo) & (geo <= log_hi)
    if "seq_mask" in corrections or "geo_mask" in corrections:
        masked_tokens = int(counts[~keep].sum())
        metrics["correction/masked_sequences_frac"] = float((~keep & (counts > 0)).sum()) / max(
            int((counts > 0).sum()), 1
        )
        metrics["correction/masked_tokens_frac"] = masked_tokens / n
        weights = weights * keep[:, None]
    return weights.float(), metrics
