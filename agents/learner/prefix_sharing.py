"""One forward of each distinct prompt per micro-batch, its KV cache shared by the rows.

A group's K branches start from one seeded reset, so a micro-batch holds K copies of each
prompt. The full-sequence forward (:func:`forkgym.agents.learner.logprobs.sequence_logits`) runs the
model over every copy; here each distinct prompt runs once, with gradients, and its KV cache
is indexed out to its rows (``Cache.batch_select_indices`` with repeated indices, an indexing
op autograd goes through), then the rows' own tokens run on top of it. The prompt's
gradient is the sum over its rows, exactly as in the full forward, so log-probs and
gradients equal the full forward's up to float rounding (tests/agents/learner/test_prefix_sharing.py);
the model reads ``K`` times fewer prompt tokens, and the LM head and log-softmax run on the
rows' own tokens only.

Layout: a row's *prompt* is everything before its first action token (the first turn's
observation); the rest (actions, later observations) is its *suffix*. Prompts are left-padded
(every prompt ends in the last column, so its last logit scores the suffix's first token) and
suffixes right-padded, with positions continuing from each prompt's own length. Results are
scattered back to the micro-batch's right-padded ``[B, T]`` layout: entry ``t`` belongs to
token ``t``, prompt entries are 0.

It needs a transformers model whose ``forward`` takes a KV cache (``cache=``, or the older
``past_key_values=``); :func:`supports_prefix_sharing` says whether one does.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch

from ..padding import pad_sequences, padding_mask
from .logprobs import position_ids_from_mask, selected_logprobs

__all__ = [
    "PrefixLayout",
    "accepts_logits_to_keep",
    "cache_argument",
    "plan_prefixes",
    "scatter_to_rows",
    "shared_prefix_logprobs",
    "suffix_output_parts",
    "suffix_outputs",
    "supports_prefix_sharing",
]


def cache_argument(model: Any) -> str | None:
    """The name of ``model.forward``'s KV-cache argument (``cache`` in transformers 5.x,
    ``past_key_values`` before it), or ``None`` when it takes neither."""
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return None
    for name in ("cache", "past_key_values"):
        if name in params:
            return name
    return None


def accepts_logits_to_keep(model: Any) -> bool:
    """Whether ``model.forward`` can compute the logits of the last positions only."""
    try:
        return "logits_to_keep" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def supports_prefix_sharing(model: Any) -> bool:
    """A transformers causal LM with a config and a KV-cache argument."""
    return getattr(model, "config", None) is not None and cache_argument(model) is not None


@dataclass
class PrefixLayout:
    """Where each row's prompt and suffix sit. ``U`` distinct prompts, ``B`` rows."""

    prompt_ids: torch.Tensor  # [U, Lp] left-padded
    prompt_mask: torch.Tensor  # [U, Lp] long
    row_prompt: torch.Tensor  # [B] index into the distinct prompts
    prompt_lengths: torch.Tensor  # [B]
    suffix_ids: torch.Tensor  # [B, Ls] right-padded (pad 0)
    suffix_mask: torch.Tensor  # [B, Ls] long
    width: int  # T, the micro-batch's width

    @property
    def distinct(self) -> int:
        return int(self.prompt_ids.shape[0])


def plan_prefixes(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, action_mask: torch.Tensor
) -> PrefixLayout | None:
    """The layout of right-padded rows, or ``None`` when no row has a token to score.

    A row's prompt ends at its first action token; a row without one (its actions masked out
    of the loss) is all suffix after its first token. Any split scores the same tokens, so
    this only decides what is shared."""
    lengths = attention_mask.sum(1)
    has_action = action_mask.any(1)
    prompt_lengths = torch.where(has_action, action_mask.long().argmax(1), 1).clamp(min=1)
    prompt_lengths = torch.minimum(prompt_lengths, lengths)
    if not bool((lengths > prompt_lengths).any()) or bool((lengths < 1).any()):
        return None
    ids_cpu = input_ids.cpu()
    seen: dict[tuple[int, ...], int] = {}
    prompts: list[list[int]] = []
    row_prompt = []
    for row, n in enumerate(prompt_lengths.tolist()):
        tokens = ids_cpu[row, :n].tolist()
        index = seen.setdefault(tuple(tokens), len(prompts))
        if index == len(prompts):
            prompts.append(tokens)
        row_prompt.append(index)
    suffix_lengths = (lengths - prompt_lengths).cpu()
    columns = prompt_lengths.cpu()[:, None] + torch.arange(int(suffix_lengths.max()))
    suffix_mask = padding_mask(suffix_lengths)
    suffix_ids = torch.where(
        suffix_mask, ids_cpu.gather(1, columns.clamp(max=ids_cpu.shape[1] - 1)), 0
    )
    device = input_ids.device
    return PrefixLayout(
        prompt_ids=pad_sequences(prompts, left=True).to(device),
        prompt_mask=padding_mask([len(p) for p in prompts], left=True).long().to(device),
        row_prompt=torch.tensor(row_prompt, dtype=torch.long, device=device),
        prompt_lengths=prompt_lengths.to(device),
        suffix_ids=suffix_ids.to(device),
        suffix_mask=suffix_mask.long().to(device),
        width=int(input_ids.shape[1]),
    )


def suffix_outputs(model: Any, layout: PrefixLayout, field: str = "logits") -> torch.Tensor:
    """``[B, Ls, ...]``: entry ``j`` is ``model``'s output ``field`` at the position before
    suffix token ``j`` (the prompt's last position for the first): the logits that score token
    ``j`` of a causal LM, or (``last_hidden_state`` of a transformer trunk) the state a critic
    values before action ``j``."""
    first, rest = suffix_output_parts(model, layout, field)
    return first if rest is None else torch.cat([first, rest], dim=1)


def suffix_output_parts(
    model: Any, layout: PrefixLayout, field: str = "logits"
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`suffix_outputs` in its two parts, not joined (joining copies the whole output,
    for logits the pass's largest tensor): ``[B, 1, ...]`` from the prompts' pass and
    ``[B, Ls - 1, ...]`` from the suffix pass (None when every suffix is one token)."""
    from transformers import DynamicCache

    cache_kw = cache_argument(model)
    assert cache_kw is not None
    cache = DynamicCache(config=model.config)
    keep = {"logits_to_keep": 1} if accepts_logits_to_keep(model) else {}
    prompt_out = model(
        input_ids=layout.prompt_ids,
        attention_mask=layout.prompt_mask,
        position_ids=position_ids_from_mask(layout.prompt_mask),
        use_cache=True,
        **{cache_kw: cache},
        **keep,
    )
    last = getattr(prompt_out, field)[:, -1]  # left padding: every prompt ends in the last column
    cache.batch_select_indices(layout.row_prompt)  # repeated indices: a prompt per row
    first = last[layout.row_prompt][:, None]
    ls = layout.suffix_ids.shape[1]
    if ls == 1:  # one token per row: the prompts' outputs are all there is
        return first, None
    # the suffix's last token scores nothing: it is fed up to the one before
    positions = layout.prompt_lengths[:, None] + torch.arange(ls - 1, device=last.device)
    mask = torch.cat([layout.prompt_mask[layout.row_prompt], layout.suffix_mask[:, :-1]], dim=1)
    out = model(
        input_ids=layout.suffix_ids[:, :-1],
        attention_mask=mask,
        position_ids=positions,
        use_cache=True,
        **{cache_kw: cache},
    )
    return first, getattr(out, field)


def shared_prefix_logprobs(
    model: Any,
    layout: PrefixLayout,
    temperature: float = 1.0,
    *,
    entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``[B, T]`` differentiable log-probs (and, with ``entropy``, detached entropies) of the
    suffix tokens, aligned like :func:`forkgym.agents.learner.logprobs.token_logprobs`; 0 on the
    prompts, garbage in the padding."""
    first, rest = suffix_output_parts(model, layout)
    targets = layout.suffix_ids
    parts = [selected_logprobs(first, targets[:, :1], temperature, entropy=entropy)]
    if rest is not None:  # each part scored where it is: no joined copy of the logits
        parts.append(selected_logprobs(rest, targets[:, 1:], temperature, entropy=entropy))
    picked = torch.cat([p for p, _ in parts], dim=1)
    if not entropy:
        return scatter_to_rows(picked, layout), None
    ent = torch.cat([e for _, e in parts if e is not None], dim=1)
    return scatter_to_rows(picked, layout), scatter_to_rows(ent, layout)


def scatter_to_rows(values: torch.Tensor, layout: PrefixLayout) -> torch.Tensor:
    """Suffix-aligned ``[B, Ls]`` back to the rows' ``[B, T]`` columns."""
    ls = values.shape[1]
    columns = layout.prompt_lengths[:, None] + torch.arange(ls, device=values.device)
    wide = int(layout.prompt_lengths.max()) + ls  # padding columns may run past T: cut below
    out = values.new_zeros((values.shape[0], max(wide, layout.width)))
    return out.scatter(1, columns, values)[:, : layout.width]
