"""Inputs for the loss tests: one response per row, every token valid."""

from __future__ import annotations

import math

import torch


def one_response_per_row(log_ratios, adv, logp=None):
    """One response per row: current log-probs (default log 0.5), behaviour log-probs giving
    ``log_ratios``, response advantages, all tokens valid."""
    lr = torch.tensor(log_ratios, dtype=torch.float64)
    x = torch.full_like(lr, math.log(0.5)) if logp is None else torch.tensor(logp, dtype=torch.float64)  # fmt: skip
    old = x - lr
    return x.clone().requires_grad_(), old, torch.tensor(adv, dtype=torch.float64), torch.ones_like(lr, dtype=torch.bool)  # fmt: skip
