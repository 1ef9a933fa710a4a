"""The data a training step passes on: built once from the rollouts, read by every stage.

:class:`RolloutBatch` is what rollouts produce: the step's groups as ``[P, K]`` grids
(reward, validity, correctness, status, generated length, truncation) plus the greedy
branch's ``[P]`` columns when one was run, the per-group timings, the weight version each
group was generated with and what generation cost.
The outcomes become the reward and validity grids here (:func:`rewards_from_outcomes`:
infrastructure failures carry NaN and are invalid). Estimators, dynamic sampling, the
generation ledger and the diagnostics read these tensors; nothing downstream walks the
episodes again.

:class:`TokenBatch` is the loss's input: the valid sampled episodes (infrastructure failures
never reach the loss), padded once, in the row-major order of the grid. Mini-batches and
micro-batches are row selections of it, each trimmed to its own longest row, so a
micro-batch holds exactly what padding its episodes alone would give.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import torch

from forkgym.verifiers import Outcome, Status

from .episode import Episode, Group
from .padding import pad_sequences, padding_mask
from .seeds import keyed_generator

__all__ = [
    "STATUSES",
    "MicroBatch",
    "RolloutBatch",
    "RolloutCost",
    "TokenBatch",
    "rewards_from_outcomes",
    "valid_from_statuses",
]

STATUSES: tuple[Status, ...] = tuple(Status)  # RolloutBatch.status holds indices into this
_CODE = {status: i for i, status in enumerate(STATUSES)}


def valid_from_statuses(statuses: Sequence[Sequence[Status | str]]) -> torch.Tensor:
    """``[P, K]`` bool mask: False exactly where the status is infrastructure (timeout/error)."""
    rows = [[not Status(s).is_infrastructure for s in row] for row in statuses]
    _check_rectangular(rows)
    return torch.tensor(rows, dtype=torch.bool).reshape(len(rows), -1)


def rewards_from_outcomes(
    outcomes: Sequence[Sequence[Outcome]],
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rewards float64 [P, K], valid bool [P, K])`` from a grid of outcomes.

    Infrastructure outcomes carry no reward: their entry is NaN (never 0) and ``valid`` is
    False there, so a forgotten mask fails loudly instead of entering a baseline as a 0.
    """
    rows = [[math.nan if o.reward is None else o.reward for o in row] for row in outcomes]
    _check_rectangular(rows)
    rewards = torch.tensor(rows, dtype=torch.float64).reshape(len(rows), -1)
    valid = valid_from_statuses([[o.status for o in row] for row in outcomes])
    return rewards, valid


def _check_rectangular(rows: Sequence[Sequence[Any]]) -> None:
    if len({len(r) for r in rows}) > 1:
        raise ValueError("expected a rectangular [prompt, rollout] grid")


@dataclass
class RolloutCost:
    """What generating a batch cost; dynamic sampling adds its rounds up."""

    generate_s: float = 0.0
    env_s: float = 0.0  # stepping envs, verification and tools included
    turns: int = 0  # batched generation calls
    tokens_generated: int = 0  # every branch, greedy ones and value continuations included
    greedy_tokens: int = 0
    value_tokens: int = (
        0  # Monte Carlo continuations from forked states (agents/generation/fork_values.py)
    )
    value_continuations: int = 0

    def __add__(self, other: RolloutCost) -> RolloutCost:
        return RolloutCost(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})  # fmt: skip


@dataclass
class RolloutBatch:
    """A step's groups as tensors: ``[P, K]`` over sampled branches, ``[P]`` per group."""

    groups: list[Group]
    k: int
    rewards: torch.Tensor  # [P, K] float64, NaN where invalid (an infrastructure failure)
    valid: torch.Tensor  # [P, K] bool
    correct: torch.Tensor  # [P, K] bool
    status: torch.Tensor  # [P, K] int64, an index into STATUSES (-1: no outcome)
    lengths: torch.Tensor  # [P, K] int64, generated tokens
    truncated: torch.Tensor  # [P, K] bool, the outcome is `truncated`
    span_s: torch.Tensor  # [P] float64, first branch done -> last branch done
    barrier_idle_s: torch.Tensor  # [P] float64, summed idle time of the group's branches
    greedy_diverged: torch.Tensor  # [P] int64: 1 diverged, 0 not, -1 not applicable
    weight_version: torch.Tensor  # [P] int64, the oldest weights any branch was generated with
    greedy_rewards: torch.Tensor | None = None  # [P] float64, NaN where invalid
    greedy_valid: torch.Tensor | None = None  # [P] bool
    greedy_correct: torch.Tensor | None = None  # [P] bool
    greedy_lengths: torch.Tensor | None = None  # [P] int64
    cost: RolloutCost | None = None
    # [P][K] (positions, values): the states of each sampled episode valued by Monte Carlo
    # continuations (agents/generation/fork_values.py; empty where none were), read from the episodes
    state_values: list[list[tuple[list[int], list[float]]]] = field(default_factory=list)
    # [P][K] (turn starts, state keys, text keys): each sampled episode's turns and the env's
    # state at their start, when the rollout recorded them (empty lists where it did not)
    turn_states: list[list[tuple[list[int], list[str], list[str]]]] = field(default_factory=list)

    @classmethod
    def from_groups(
        cls, groups: Sequence[Group], k: int, cost: RolloutCost | None = None
    ) -> RolloutBatch:
        """Read every episode once; groups must hold ``k`` sampled branches each."""
        groups = list(groups)
        p = len(groups)
        sampled = [ep for g in groups for ep in g.sampled]
        if len(sampled) != p * k:
            raise ValueError(f"expected {k} sampled branches in each of {p} groups")

        def grid(values: list, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
            return torch.tensor(values, dtype=dtype).reshape(shape)

        greedy: dict[str, torch.Tensor] = {}
        if p and groups[0].greedy is not None:
            branches = [_greedy(g) for g in groups]
            g_rewards, g_valid = rewards_from_outcomes([[_outcome(ep) for ep in branches]])
            greedy = {
                "greedy_rewards": g_rewards.reshape(p),
                "greedy_valid": g_valid.reshape(p),
                "greedy_correct": grid([_correct(ep) for ep in branches], torch.bool, (p,)),
                "greedy_lengths": grid([ep.generated_tokens for ep in branches], torch.int64, (p,)),
            }
        diverged = [-1 if g.greedy_diverged is None else int(g.greedy_diverged) for g in groups]
        oldest = [min(ep.weight_version for ep in g.branches) for g in groups]
        rewards, valid = rewards_from_outcomes([[_outcome(ep) for ep in sampled]])
        return cls(
            groups=groups,
            k=k,
            rewards=rewards.reshape(p, k),
            valid=valid.reshape(p, k),
            correct=grid([_correct(ep) for ep in sampled], torch.bool, (p, k)),
            status=grid([_status(ep) for ep in sampled], torch.int64, (p, k)),
            lengths=grid([ep.generated_tokens for ep in sampled], torch.int64, (p, k)),
            truncated=grid([ep.truncated for ep in sampled], torch.bool, (p, k)),
            span_s=grid([g.span_s for g in groups], torch.float64, (p,)),
            barrier_idle_s=grid([g.barrier_idle_s for g in groups], torch.float64, (p,)),
            greedy_diverged=grid(diverged, torch.int64, (p,)),
            weight_version=grid(oldest, torch.int64, (p,)),
            cost=cost or RolloutCost(),
            state_values=_state_values(groups),
            turn_states=[
                [
                    (list(ep.turn_starts), list(ep.state_keys), list(ep.text_keys))
                    for ep in g.sampled
                ]
                for g in groups
            ],
            **greedy,
        )

    def with_state_values(self) -> RolloutBatch:
        """The batch with :attr:`state_values` read again from its episodes (after the gen
        stage valued their states)."""
        return replace(self, state_values=_state_values(self.groups))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the groups and the cost; every tensor is rebuilt from the groups."""
        return {
            "k": self.k,
            "groups": [g.to_dict() for g in self.groups],
            "cost": None if self.cost is None else asdict(self.cost),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RolloutBatch:
        cost = data.get("cost")
        return cls.from_groups(
            [Group.from_dict(g) for g in data["groups"]],
            int(data["k"]),
            None if cost is None else RolloutCost(**cost),
        )

    # -- shape and selection ------------------------------------------------------------------

    @property
    def prompts(self) -> int:
        return len(self.groups)

    def select(self, keep: torch.Tensor) -> RolloutBatch:
        """The groups where ``keep [P]`` (bool) is True, or at the indices ``keep`` (int)."""
        index = keep.nonzero().squeeze(1) if keep.dtype == torch.bool else keep
        picked = {
            f.name: getattr(self, f.name)[index]
            for f in fields(self)
            if isinstance(getattr(self, f.name), torch.Tensor)
        }
        chosen = index.tolist()
        values = [self.state_values[i] for i in chosen] if self.state_values else []
        turns = [self.turn_states[i] for i in chosen] if self.turn_states else []
        return replace(
            self,
            groups=[self.groups[i] for i in chosen],
            state_values=values,
            turn_states=turns,
            **picked,
        )

    @classmethod
    def cat(cls, batches: Sequence[RolloutBatch], cost: RolloutCost) -> RolloutBatch:
        """The groups of several batches (of one ``k``) in order, with the given cost."""
        first = batches[0]
        joined = {
            f.name: torch.cat([getattr(b, f.name) for b in batches])
            for f in fields(first)
            if isinstance(getattr(first, f.name), torch.Tensor)
        }
        return replace(
            first,
            groups=[g for b in batches for g in b.groups],
            cost=cost,
            state_values=[v for b in batches for v in b.state_values],
            turn_states=[t for b in batches for t in b.turn_states],
            **joined,
        )

    # -- views ----------------------------------------------------------------------------------

    @property
    def sampled(self) -> list[Episode]:
        """The sampled episodes, row-major (group by group), as the grids hold them."""
        return [ep for g in self.groups for ep in g.sampled]

    @property
    def episodes(self) -> list[Episode]:
        """Every episode, greedy branches included."""
        out = []
        for g in self.groups:
            out.extend(g.sampled)
            if g.greedy is not None:
                out.append(g.greedy)
        return out

    def status_counts(self) -> dict[Status, int]:
        """How many sampled episodes ended in each status (every status, zeros included)."""
        counts = torch.bincount(self.status[self.status >= 0], minlength=len(STATUSES))
        return dict(zip(STATUSES, counts.tolist(), strict=True))


def _state_values(groups: Sequence[Group]) -> list[list[tuple[list[int], list[float]]]]:
    return [[(list(ep.value_positions), list(ep.values)) for ep in g.sampled] for g in groups]


def _outcome(ep: Episode) -> Outcome:
    if ep.outcome is None:
        raise ValueError(f"episode {ep.group}/{ep.branch} has no outcome: it did not finish")
    return ep.outcome


def _greedy(group: Group) -> Episode:
    if group.greedy is None:
        raise ValueError("either every group has a greedy branch or none has")
    return group.greedy


def _correct(ep: Episode) -> bool:
    return ep.outcome is not None and ep.outcome.status is Status.CORRECT


def _status(ep: Episode) -> int:
    return -1 if ep.outcome is None else _CODE[ep.outcome.status]


@dataclass
class MicroBatch:
    """Rows of a :class:`TokenBatch`, trimmed to their longest row, on the training device."""

    rows: torch.Tensor  # [B] indices into the TokenBatch
    input_ids: torch.Tensor  # [B, T] long
    attention_mask: torch.Tensor  # [B, T] long
    action_mask: torch.Tensor  # [B, T] bool
    old_logprobs: torch.Tensor  # [B, T] float32, 0 off the action mask
    advantages: torch.Tensor  # [B] (response-level) or [B, T] (token-level, a critic's)
    is_weights: torch.Tensor | None = None  # [B, T] train/serve correction weights (drift.py)

    @property
    def tokens(self) -> int:
        return int(self.action_mask.sum())


@dataclass
class TokenBatch:
    """The valid sampled episodes of a step, right-padded once (the loss's input).

    Row ``i`` is the episode at flat grid position ``index[i]`` (``p * K + k``), in
    row-major order. ``action_mask`` marks the tokens the policy generated (the only ones in
    the loss) and ``old_logprobs`` their behaviour log-probs; entry ``t`` belongs to token
    ``t``.
    """

    index: torch.Tensor  # [N] int64
    input_ids: torch.Tensor  # [N, T] long
    attention_mask: torch.Tensor  # [N, T] long
    action_mask: torch.Tensor  # [N, T] bool
    old_logprobs: torch.Tensor  # [N, T] float32
    lengths: torch.Tensor  # [N] int64, tokens in the row (prompt, actions, observations)
    truncated: torch.Tensor  # [N] bool
    is_weights: torch.Tensor | None = None  # [N, T] float32, see forkgym.agents.learner.drift

    @classmethod
    def from_rollouts(cls, batch: RolloutBatch, pad_id: int) -> TokenBatch:
        index = batch.valid.reshape(-1).nonzero().squeeze(1)
        sampled = batch.sampled
        episodes = [sampled[i] for i in index.tolist()]
        if not episodes:
            empty = torch.zeros((0, 0), dtype=torch.long)
            return cls(
                index=index,
                input_ids=empty,
                attention_mask=empty,
                action_mask=empty.bool(),
                old_logprobs=empty.float(),
                lengths=torch.zeros(0, dtype=torch.int64),
                truncated=torch.zeros(0, dtype=torch.bool),
            )
        lengths = [len(ep.token_ids) for ep in episodes]
        return cls(
            index=index,
            input_ids=pad_sequences([ep.token_ids for ep in episodes], value=pad_id),
            attention_mask=padding_mask(lengths).long(),
            action_mask=pad_sequences([ep.action_mask for ep in episodes], dtype=torch.bool),
            old_logprobs=pad_sequences([ep.logprobs for ep in episodes], dtype=torch.float32),
            lengths=torch.tensor(lengths, dtype=torch.int64),
            truncated=batch.truncated.reshape(-1)[index],
        )

    def __len__(self) -> int:
        return int(self.index.numel())

    @property
    def generated(self) -> torch.Tensor:
        """``[N]`` action tokens per row."""
        return self.action_mask.sum(1)

    def minibatches(self, count: int, shuffle_key: tuple[int | str, ...] | None = None) -> list[list[int]]:  # fmt: skip
        """One pass over the rows in ``count`` mini-batches: in order, or shuffled by a
        generator seeded from ``shuffle_key`` (so the order is a function of the key)."""
        order = list(range(len(self)))
        if shuffle_key is not None:
            order = torch.randperm(len(self), generator=keyed_generator(*shuffle_key)).tolist()
        size = math.ceil(len(order) / count)
        return [order[start : start + size] for start in range(0, len(order), size)]

    def score(
        self,
        fn: Callable[[MicroBatch], torch.Tensor],
        *,
        size: int,
        device: str | torch.device = "cpu",
    ) -> torch.Tensor:
        """``[N, T]`` float32 on the CPU: ``fn(micro-batch) -> [B, width]`` over every row (a
        reference model's log-probs, a critic's values), 0 in the padding."""
        out = torch.zeros(self.input_ids.shape, dtype=torch.float32)
        for mb in self.micro_batches(range(len(self)), None, size=size, device=device):
            out[mb.rows, : mb.input_ids.size(1)] = fn(mb).float().cpu()
        return out

    def to_grid(self, rows: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
        """``rows [N]`` back in the step's ``[P, K]`` grid (of ``rows``' dtype), 0 where no row
        is (invalid responses)."""
        out = torch.zeros(math.prod(shape), dtype=rows.dtype)
        out[self.index] = rows
        return out.reshape(tuple(shape))

    def with_action_mask(self, action_mask: torch.Tensor) -> TokenBatch:
        return replace(self, action_mask=action_mask)

    def with_correction(self, old_logprobs: torch.Tensor, is_weights: torch.Tensor) -> TokenBatch:
        """The same rows with the loss's ratio anchored at ``old_logprobs`` (the trainer's own)
        and each token's policy term scaled by ``is_weights``."""
        return replace(self, old_logprobs=old_logprobs, is_weights=is_weights)

    def micro_batches(
        self,
        rows: Sequence[int],
        advantages: torch.Tensor | None,
        *,
        size: int,
        device: str | torch.device = "cpu",
    ) -> list[MicroBatch]:
        """``rows`` (in order) in micro-batches of at most ``size``; ``advantages`` is ``[N]``
        or ``[N, T]`` over this batch's rows (``None``: zeros, for passes that need none)."""
        out = []
        for start in range(0, len(rows), size):
            index = torch.tensor(list(rows[start : start + size]), dtype=torch.int64)
            width = int(self.lengths[index].max())
            adv = torch.zeros(len(index)) if advantages is None else advantages[index]
            if adv.ndim == 2:
                adv = adv[:, :width]
            out.append(
                MicroBatch(
                    rows=index,
                    input_ids=self.input_ids[index, :width].to(device),
                    attention_mask=self.attention_mask[index, :width].to(device),
                    action_mask=self.action_mask[index, :width].to(device),
                    old_logprobs=self.old_logprobs[index, :width].to(device),
                    advantages=adv.to(device),
                    is_weights=None
                    if self.is_weights is None
                    else self.is_weights[index, :width].to(device),
                )
            )
        return out
