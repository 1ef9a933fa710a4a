"""The generation ledger: every round's tokens counted, kept or not (S4, S10)."""

from __future__ import annotations

import math

import pytest
import torch

from forkgym.agents.generation.dapo import filter_groups
from forkgym.agents.generation.ledger import GenerationLedger


def test_ledger_reports_the_true_generation_cost():
    ledger = GenerationLedger()
    rewards1 = torch.tensor([[1.0, 1.0], [0.0, 1.0], [0.0, 0.0]])
    lengths1 = torch.tensor([[10, 20], [30, 40], [50, 60]])
    keep1 = filter_groups(rewards1, None, lengths1, ledger, greedy_lengths=torch.tensor([5, 5, 5]))
    assert keep1.tolist() == [False, True, False]
    rewards2 = torch.tensor([[0.0, 1.0], [1.0, math.nan]])
    valid2 = ~torch.isnan(rewards2)
    lengths2 = torch.tensor([[7, 8], [9, 11]])
    keep2 = filter_groups(rewards2, valid2, lengths2, ledger)
    assert keep2.tolist() == [True, False]
    r = ledger.report()
    assert r["gen/rounds"] == 2
    assert r["gen/prompts_sampled"] == 5 and r["gen/prompts_accepted"] == 2
    assert r["gen/prompts_discarded"] == 3
    assert r["gen/tokens_sampled"] == 210 + 35
    assert r["gen/tokens_accepted"] == 70 + 15
    assert r["gen/tokens_discarded"] == 245 - 85
    assert r["gen/greedy_tokens"] == 15 and r["gen/tokens_generated"] == 260
    assert r["gen/responses_infra_failed"] == 1
    assert r["gen/token_accept_rate_of_sampled"] == pytest.approx(85 / 245)
    assert r["gen/generated_per_accepted_token"] == pytest.approx(260 / 85)
    assert all(isinstance(v, float) for v in r.values())

    total = ledger + ledger
    assert total.tokens_sampled == 2 * ledger.tokens_sampled and total.rounds == 4


def test_ledger_validates():
    with pytest.raises(ValueError):
        GenerationLedger().record(torch.ones(3, 2), torch.ones(2, dtype=torch.bool))
    with pytest.raises(ValueError, match=">= 0"):
        GenerationLedger().record(-torch.ones(1, 2), torch.ones(1, dtype=torch.bool))
    assert GenerationLedger().report()["gen/generated_per_accepted_token"] == math.inf
