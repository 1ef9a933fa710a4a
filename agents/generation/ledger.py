"""The generation ledger: what generating a step's groups cost and what was kept (S4, S10).

Every round of a step's generation (dynamic sampling draws several) is recorded, so the report
states the tokens generated beside the tokens trained on: a report that says "N tokens" also
says "of M sampled", and a greedy branch's tokens (ReMax) are counted as the cost they are.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

import torch

__all__ = ["GenerationLedger"]


@dataclass
class GenerationLedger:
    """What generation cost and what was kept, accumulated over filter rounds and steps.

    ``tokens_sampled`` counts every generated token of every sampled response (infra-failed
    ones included: they were generated); ``greedy_tokens`` is the extra cost of ReMax-style
    greedy branches (S4). ``tokens_accepted`` are the tokens of kept groups. Nothing here is
    an estimate: the caller passes the true generated lengths. ``value_tokens`` are the Monte
    Carlo continuations that estimate states' values (``algorithm: vine``): generated, so
    counted in ``tokens_generated``, though no loss trains on them.
    """

    rounds: int = 0
    prompts_sampled: int = 0
    prompts_accepted: int = 0
    responses_sampled: int = 0
    responses_accepted: int = 0
    responses_infra_failed: int = 0
    tokens_sampled: int = 0
    tokens_accepted: int = 0
    greedy_responses: int = 0
    greedy_tokens: int = 0
    value_continuations: int = 0
    value_tokens: int = 0

    def record(
        self,
        lengths: torch.Tensor,
        accepted: torch.Tensor,
        *,
        valid: torch.Tensor | None = None,
        greedy_lengths: torch.Tensor | None = None,
    ) -> None:
        """Account one round: generated ``lengths [P, K]``, kept groups ``accepted [P]``."""
        if lengths.ndim != 2 or accepted.shape != lengths.shape[:1]:
            raise ValueError("expected lengths [P, K] and accepted [P]")
        lengths = lengths.to(torch.int64)
        if (lengths < 0).any():
            raise ValueError("lengths must be >= 0")
        acc = accepted.to(torch.bool)
        per_group = lengths.sum(1)
        self.rounds += 1
        self.prompts_sampled += lengths.size(0)
        self.prompts_accepted += int(acc.sum())
        self.responses_sampled += lengths.numel()
        self.responses_accepted += int(acc.sum()) * lengths.size(1)
        if valid is not None:
            self.responses_infra_failed += int((~valid.to(torch.bool)).sum())
        self.tokens_sampled += int(per_group.sum())
        self.tokens_accepted += int(per_group[acc].sum())
        if greedy_lengths is not None:
            self.greedy_responses += greedy_lengths.numel()
            self.greedy_tokens += int(greedy_lengths.to(torch.int64).sum())

    def record_values(self, continuations: int, tokens: int) -> None:
        """Account the value continuations run for the kept groups."""
        self.value_continuations += continuations
        self.value_tokens += tokens

    @property
    def prompts_discarded(self) -> int:
        return self.prompts_sampled - self.prompts_accepted

    @property
    def tokens_discarded(self) -> int:
        return self.tokens_sampled - self.tokens_accepted

    @property
    def tokens_generated(self) -> int:
        """Everything the generator produced: sampled, greedy and value-continuation tokens."""
        return self.tokens_sampled + self.greedy_tokens + self.value_tokens

    def report(self, prefix: str = "gen/") -> dict[str, float]:
        """Counts with their denominators named; rates are over *sampled* quantities."""
        values = asdict(self)
        if not self.value_continuations:  # runs that value no states: their keys as before
            del values["value_continuations"], values["value_tokens"]
        out = {f"{prefix}{k}": float(v) for k, v in values.items()}
        out[f"{prefix}prompts_discarded"] = float(self.prompts_discarded)
        out[f"{prefix}tokens_discarded"] = float(self.tokens_discarded)
        out[f"{prefix}tokens_generated"] = float(self.tokens_generated)
        out[f"{prefix}prompt_accept_rate_of_sampled"] = self.prompts_accepted / max(
            self.prompts_sampled, 1
        )
        out[f"{prefix}token_accept_rate_of_sampled"] = self.tokens_accepted / max(
            self.tokens_sampled, 1
        )
        out[f"{prefix}generated_per_accepted_token"] = (
            self.tokens_generated / self.tokens_accepted if self.tokens_accepted else math.inf
        )
        return out

    def __add__(self, other: GenerationLedger) -> GenerationLedger:
        return GenerationLedger(
            **{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)}
        )
