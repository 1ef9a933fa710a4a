"""The :class:`~forkgym.agents.generation.backends.policy.Policy` on Hugging Face transformers: batched, KV-cached.

``model.generate`` cannot take a temperature, a top-p and a seed per request in one batch,
so :class:`HFPolicy` runs its own decode loop on ``model(...)``:

* prompts are left-padded into one batch, with an attention mask and position ids counted
  from each row's first real token (so padding changes nothing but float rounding);
* one prefill forward of each distinct prompt (logits of the last position only; a group's
  K requests share one, and its KV cache is indexed out to their rows), then one step per
  new token: for a Llama- or Qwen2-shaped model by default (``decode="fused"``)
  :class:`~forkgym.agents.generation.backends.fused_decode.FusedDecoder`'s step, the model's own layer in fewer
  operations over one buffer of keys and values (the same tokens up to float rounding);
  otherwise (``decode="model"``, or a model it cannot serve) one forward of the model on the
  KV cache (``cache=``, the transformers 5.x name; ``past_key_values=`` for
  models whose ``forward`` predates it). By default (``kv_cache="preallocated"``) that cache is a
  ``DynamicCache`` whose full-attention layers hold the batch's whole length in buffers
  allocated once (:mod:`forkgym.agents.generation.backends.kv_cache`: the same numbers, without copying the cache
  at every token); ``kv_cache="dynamic"`` keeps transformers' own, which grows by
  concatenation;
* rows that finish (a stop token, or their own ``max_new_tokens``) leave the batch and the KV
  cache at once (``Cache.batch_select_indices``), so short answers stop costing compute; the
  live rows' settings are compacted then, so a step indexes nothing;
* sampling is vectorised over rows: log-softmax of ``logits / T`` per row (no division when
  every ``T`` is 1), the top-p nucleus from one sort (only when some row has top-p < 1), and
  the inverse of each row's cumulative distribution (summed in float64, in token-id order) at
  one uniform per row and token.

**Determinism.** Each sampled row draws its uniforms (one float64 per token) from its own
``torch.Generator`` (on the CPU by default, so the same numbers on any device;
``noise_device="model"`` draws them where the model runs, with the device's own random
stream), seeded with the request's seed (or, for a request without one, with a seed drawn
from the policy's own generator, ``HFPolicy(seed=...)``, in request order; torch's global RNG
is never used). The ``k``-th token of a row uses exactly the ``k``-th uniform of its stream,
whatever else is in the batch and however long the other rows run (they are drawn in blocks
of a fixed size, which gives the same numbers). So the same request with the same seed and
weights gives the same tokens alone or in any batch, up to float rounding of the logits under
different padding (which can only matter when the uniform falls within ~1e-6 of a boundary
of the cumulative distribution). Greedy rows use no randomness.

**Log-probs** follow :mod:`forkgym.agents.generation.backends.policy`: ``log_softmax(logits / T)`` over the full
vocabulary, at the request's temperature (``T = 1`` for greedy), never renormalised over the
nucleus; :mod:`forkgym.agents.learner.logprobs` computes the same quantity with gradients for the
learner.

**Weights.** ``sync_weights(weights)`` takes the trainer's model (or a state dict): a policy
built on that very module (the ``transformers`` backend's default, ``share_model=True``) has
nothing to copy and only moves its version; a policy on a separate copy loads the weights.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import torch

from ...learner.logprobs import position_ids_from_mask, token_logprobs
from ...learner.prefix_sharing import accepts_logits_to_keep, cache_argument
from ...padding import pad_sequences, padding_mask
from ...seeds import generator
from .fused_decode import FusedDecoder, FusedWeights, unsupported
from .kv_cache import preallocated_cache
from .policy import Generation, GenerationRequest, Policy, check_scoring, request_seeds

__all__ = ["HFPolicy"]


# -- the policy ---------------------------------------------------------------------------------

_STOP, _LENGTH = 1, 2


class HFPolicy(Policy):
    """A transformers causal LM behind the :class:`~forkgym.agents.generation.backends.policy.Policy` protocol.

    ``model`` may be the trainer's own module (``sync_weights`` then copies nothing and bumps
    the version) or a separate copy that loads the trainer's weights in ``sync_weights``. ``max_batch`` rows are decoded together at most (longer
    request lists are split after sorting by prompt length, which only saves padding);
    :meth:`logprobs` also keeps each forward's ``[rows, width, vocab]`` logits under
    ``max_logit_elements`` (2**26 floats, 256 MB: 65,536 tokens of a 1,024-token vocabulary,
    441 of Qwen's 151,936). ``seed`` seeds the stream that gives unseeded sampled requests
    their seeds. ``share_prefill=False`` prefills every request's prompt on its own (the
    tokens are the same; it exists to measure what sharing saves). ``kv_cache``: ``"preallocated"``
    (the default) or ``"dynamic"`` (transformers' growing cache; the same tokens, slower).
    ``decode``: ``"fused"`` (the default) runs the decode steps of a Llama- or Qwen2-shaped
    model with :class:`~forkgym.agents.generation.backends.fused_decode.FusedDecoder` (the same layer in fewer
    operations; logits equal to the model's ``forward`` up to float rounding), and any other
    model with its ``forward``, as ``"model"`` does for every model; ``fused_unsupported``
    says why a model decodes with its ``forward``.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any | None = None,
        device: str | torch.device | None = None,
        max_batch: int = 128,
        seed: int = 0,
        max_logit_elements: int = 2**26,
        share_prefill: bool = True,
        noise_device: str = "cpu",
        kv_cache: str = "preallocated",
        decode: str = "fused",
    ) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        if kv_cache not in ("preallocated", "dynamic"):
            raise ValueError(f"kv_cache must be 'preallocated' or 'dynamic', got {kv_cache!r}")
        self.kv_cache = kv_cache
        if decode not in ("fused", "model"):
            raise ValueError(f"decode must be 'fused' or 'model', got {decode!r}")
        # why the fused decode step cannot serve this model (None: it decodes with it)
        self.fused_unsupported = unsupported(model) if decode == "fused" else "decode='model'"
        if noise_device not in ("cpu", "model"):
            raise ValueError(f"noise_device must be 'cpu' or 'model', got {noise_device!r}")
        self.noise_device = noise_device
        self.max_logit_elements = max_logit_elements
        self.model = model
        self.tokenizer = tokenizer
        if device is not None:
            self.model.to(device)
        self.device = next(model.parameters()).device
        self.max_batch = max_batch
        pad = getattr(tokenizer, "pad_token_id", None)
        if pad is None:
            pad = getattr(model.config, "pad_token_id", None)
        self.pad_token_id = int(pad) if pad is not None else 0
        self.share_prefill = share_prefill
        self._seed_stream = generator(seed)
        self._version = 0
        self._cache_kw = cache_argument(model) or "past_key_values"
        self._has_logits_to_keep = accepts_logits_to_keep(model)

    # -- Policy protocol ------------------------------------------------------------------------

    @property
    def weight_version(self) -> int:
        return self._version

    def sync_weights(
        self, weights: torch.nn.Module | Mapping[str, Any] | None = None, version: int | None = None
    ) -> dict[str, float]:
        """Take the trainer's weights, then move the version (to ``version`` if given).

        ``weights`` is the trainer's model or its ``state_dict``. When it is this policy's own
        module (or ``None``: the caller says the model is shared) nothing is copied; otherwise
        the weights are loaded (strict: every key of the model, nothing else).
        """
        stats: dict[str, float] = {}  # a shared module costs nothing and reports nothing
        if weights is not None and weights is not self.model:
            state = weights.state_dict() if isinstance(weights, torch.nn.Module) else weights
            with torch.no_grad():
                self.model.load_state_dict(state, strict=True)
            stats["bytes"] = float(sum(t.numel() * t.element_size() for t in state.values()))
        self._version = self._version + 1 if version is None else int(version)
        return stats

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        requests = list(requests)
        vocab = self._vocab_size()
        for i, request in enumerate(requests):  # all checks first: nothing runs or is drawn
            for t in request.params.stop_token_ids:
                if not 0 <= t < vocab:
                    raise ValueError(
                        f"request {i}: stop token id {t} is outside the vocabulary (size {vocab})"
                    )
        seeds = request_seeds(requests, self._seed_stream)
        order = sorted(range(len(requests)), key=lambda i: len(requests[i].prompt_ids))
        results: list[Generation | None] = [None] * len(requests)
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.inference_mode():
                # the fused step's weights, read once per call: every batch of it shares them
                fused = FusedWeights(self.model) if self.fused_unsupported is None else None
                for start in range(0, len(order), self.max_batch):
                    chunk = order[start : start + self.max_batch]
                    outs = self._generate_batch(
                        [requests[i] for i in chunk], [seeds[i] for i in chunk], fused
                    )
                    for i, out in zip(chunk, outs, strict=True):
                        results[i] = out
        finally:
            self.model.train(was_training)
        return results  # type: ignore[return-value]

    def logprobs(
        self,
        sequences: Sequence[Sequence[int]],
        starts: Sequence[int],
        temperature: float = 1.0,
    ) -> list[torch.Tensor]:
        """Float32 CPU tensors: log-probs of ``sequences[i][starts[i]:]`` given their prefixes,
        at ``temperature`` (full vocabulary). ``starts[i]`` must be in ``1 .. len``."""
        if not temperature > 0:
            raise ValueError("temperature must be > 0")
        check_scoring(sequences, starts)
        order = sorted(range(len(sequences)), key=lambda i: len(sequences[i]))
        results: list[torch.Tensor | None] = [None] * len(sequences)
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.inference_mode():
                for chunk in self._logprob_chunks([len(sequences[i]) for i in order], order):
                    rows = [sequences[i] for i in chunk]
                    ids = pad_sequences(rows, value=self.pad_token_id)
                    mask = padding_mask([len(r) for r in rows]).long()
                    lp = token_logprobs(
                        self.model, ids.to(self.device), mask.to(self.device), temperature
                    ).cpu()
                    for row, i in enumerate(chunk):
                        results[i] = lp[row, starts[i] : len(sequences[i])].clone()
        finally:
            self.model.train(was_training)
        return results  # type: ignore[return-value]

    def _logprob_chunks(self, lengths: list[int], order: list[int]) -> list[list[int]]:
        """Split ``order`` (sorted by length) into forwards of at most ``max_batch`` rows whose
        logits stay under ``max_logit_elements`` (a single sequence always gets its own)."""
        vocab = self._vocab_size()
        chunks: list[list[int]] = []
        for index, length in zip(order, lengths, strict=True):
            if chunks:
                rows = len(chunks[-1]) + 1
                if rows <= self.max_batch and rows * length * vocab <= self.max_logit_elements:
                    chunks[-1].append(index)
                    continue
            chunks.append([index])
        return chunks

    # -- decoding -------------------------------------------------------------------------------

    def _forward(
        self, ids: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor, cache: Any
    ) -> torch.Tensor:
        kwargs: dict[str, Any] = {self._cache_kw: cache}
        if self._has_logits_to_keep:
            kwargs["logits_to_keep"] = 1
        out = self.model(
            input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, **kwargs
        )
        return out.logits[:, -1].float()

    def _vocab_size(self) -> int:
        """Width of the logits (the output embedding's rows)."""
        head = self.model.get_output_embeddings()
        if head is not None and getattr(head, "weight", None) is not None:
            return int(head.weight.shape[0])
        return int(self.model.config.vocab_size)

    def _new_cache(self, capacity: int) -> Any:
        """An empty KV cache for ``capacity`` positions (prompt width plus new tokens)."""
        if self.kv_cache == "preallocated":
            return preallocated_cache(self.model.config, capacity)
        from transformers import DynamicCache

        return DynamicCache(config=self.model.config)

    def _generate_batch(
        self,
        requests: list[GenerationRequest],
        seeds: list[int | None],
        fused: FusedWeights | None = None,
    ) -> list[Generation]:
        """One batch of requests; ``fused``: decode with :class:`FusedDecoder` on these
        weights (None: with the model's ``forward``)."""
        dev = self.device
        n = len(requests)
        params = [r.params for r in requests]
        # a group's K requests share one prompt: prefill each distinct prompt once and give
        # every row its prompt's cache (the same keys and values the row's own prefill makes)
        distinct: dict[Hashable, int] = {}  # a prompt's key -> its index in `prompts`
        prompts: list[tuple[int, ...]] = []
        row_prompt = []
        for i, request in enumerate(requests):
            key = tuple(request.prompt_ids) if self.share_prefill else i
            if key not in distinct:
                distinct[key] = len(prompts)
                prompts.append(request.prompt_ids)
            row_prompt.append(distinct[key])
        ids = pad_sequences(prompts, value=self.pad_token_id, left=True)
        mask = padding_mask([len(p) for p in prompts], left=True).long()
        pos = position_ids_from_mask(mask)
        steps = max(p.max_new_tokens for p in params)
        width = ids.shape[1]

        cache = self._new_cache(width + steps)
        logits = self._forward(ids.to(dev), mask.to(dev), pos.to(dev), cache)
        fused = fused if steps > 1 else None
        index = None
        if len(prompts) < n:
            index = torch.tensor(row_prompt, device=dev)
            if fused is None:  # the fused decoder reads each row's prompt through `index`
                cache.batch_select_indices(index)
            logits, mask, pos = logits[index], mask[index.cpu()], pos[index.cpu()]
        # the attention mask of every step, allocated once: step s passes its first
        # width + s + 1 columns (the prompt's mask, then ones)
        full_mask = torch.ones((n, width + steps), dtype=mask.dtype, device=dev)
        full_mask[:, :width] = mask.to(dev)
        next_pos = pos[:, -1].to(dev) + 1
        decoder = None
        if fused is not None:
            decoder = FusedDecoder(fused, cache, full_mask, width + steps, index)
        live = _LiveRows(params, dev, logits.shape[-1])
        uniforms = _Uniforms(seeds, steps, device=dev if self.noise_device == "model" else None)

        tokens = torch.zeros((n, steps), dtype=torch.long, device=dev)
        logps = torch.zeros((n, steps), dtype=torch.float32, device=dev)
        n_tokens = [0] * n
        finish = [_LENGTH] * n
        for step in range(steps):
            token, logp = self._pick(logits, live, uniforms.at(step))
            if live.all_rows:
                tokens[:, step] = token
                logps[:, step] = logp
            else:
                tokens[live.rows, step] = token
                logps[live.rows, step] = logp
            done = stopped = live.stopped(token)
            if step + 1 >= live.min_budget:  # some row reaches its own max_new_tokens
                at_length = live.max_new <= step + 1
                done = at_length if stopped is None else stopped | at_length
            if done is None or not bool(done.any()):
                next_ids = token
            else:
                ended = done.nonzero().squeeze(1).tolist()
                for i, row in zip(ended, live.rows[ended].tolist(), strict=True):
                    n_tokens[row] = step + 1
                    finish[row] = _STOP if stopped is not None and bool(stopped[i]) else _LENGTH
                if len(ended) == len(done):
                    break
                # finished rows leave the batch and the cache
                keep = (~done).nonzero().squeeze(1)
                live.keep(keep)
                uniforms.keep(keep)
                next_ids, next_pos = token[keep], next_pos[keep]
                if decoder is None:
                    cache.batch_select_indices(keep)
                    full_mask = full_mask[keep]
                else:
                    decoder.select(keep)
            if decoder is None:
                logits = self._forward(
                    next_ids[:, None], full_mask[:, : width + step + 1], next_pos[:, None], cache
                )
            else:
                logits = decoder.step(next_ids, next_pos)
            next_pos = next_pos + 1

        tokens_l, logps_l = tokens.cpu().tolist(), logps.cpu().tolist()
        return [
            Generation(
                token_ids=tuple(tokens_l[row][: n_tokens[row]]),
                logprobs=tuple(logps_l[row][: n_tokens[row]]),
                finish_reason="stop" if finish[row] == _STOP else "length",
            )
            for row in range(n)
        ]

    def _pick(
        self, logits: torch.Tensor, live: _LiveRows, uniform: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Next token and its log-prob (full vocabulary, at the row's temperature) per live
        row; ``uniform``: the rows' ``[rows]`` float64 uniforms (None: every row is greedy)."""
        scaled = logits if live.temps is None else logits / live.temps[:, None]
        logp = torch.log_softmax(scaled, dim=-1)
        if uniform is None:
            token = logits.argmax(-1)
        else:
            probs = logp.exp()
            if (
                live.top_p is not None
            ):  # the smallest prefix of the sorted vocabulary with mass >= p
                sorted_probs, order = probs.sort(dim=-1, descending=True)
                outside = (sorted_probs.cumsum(-1) - sorted_probs) >= live.top_p[:, None]
                outside &= (live.top_p < 1.0)[:, None]
                probs = probs.masked_fill(outside.scatter(1, order, outside), 0.0)
            token = inverse_cdf(probs, uniform.to(logits.device))
            if live.greedy is not None:
                token = torch.where(live.greedy, logits.argmax(-1), token)
        return token, logp.gather(1, token[:, None]).squeeze(1)


def inverse_cdf(probs: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """``[rows]`` tokens: in each row of ``probs`` (``[rows, V]``, not necessarily normalised,
    zeros allowed), the first token whose cumulative sum in float64 exceeds ``uniform`` (in
    ``[0, 1)``) times the row's total: a draw from ``probs / total``, and never a token of
    probability 0."""
    cdf = probs.to(torch.float64).cumsum(-1)
    total = cdf[:, -1:]
    # strictly below the total, so some token's cumulative sum exceeds it
    target = torch.minimum(
        uniform.to(torch.float64)[:, None] * total, total.nextafter(total.new_zeros(()))
    )
    return torch.searchsorted(cdf, target, right=True).squeeze(1)


class _LiveRows:
    """The per-row settings of the rows still decoding, in batch order, compacted when rows
    leave (:meth:`keep`), so that a step indexes nothing. A setting every row shares at its
    neutral value is ``None`` (no division by a temperature of 1, no nucleus, no greedy
    argmax): skipping those operations changes no number."""

    def __init__(self, params: list[Any], device: torch.device, vocab: int) -> None:
        n = len(params)
        self.rows = torch.arange(n, device=device)  # original row of each live row
        self.all_rows = True  # no row has left yet
        self.max_new = torch.tensor([p.max_new_tokens for p in params], device=device)
        self.min_budget = min(p.max_new_tokens for p in params)
        greedy = [p.greedy for p in params]
        temps = [1.0 if p.greedy else p.temperature for p in params]
        top_p = [1.0 if p.greedy else p.top_p for p in params]
        self.greedy = torch.tensor(greedy, device=device) if any(greedy) else None
        self.temps = None if all(t == 1.0 for t in temps) else torch.tensor(temps, device=device)
        self.top_p = None if all(t >= 1.0 for t in top_p) else torch.tensor(top_p, device=device)
        self.stop_table: torch.Tensor | None = None  # [rows, V]: whether a token stops the row
        if any(p.stop_token_ids for p in params):
            table = torch.zeros((n, vocab), dtype=torch.bool)
            for row, p in enumerate(params):
                table[row, list(p.stop_token_ids)] = True
            self.stop_table = table.to(device)

    def stopped(self, token: torch.Tensor) -> torch.Tensor | None:
        """Whether each live row's ``token`` is one of its stop tokens (None: no row has any)."""
        if self.stop_table is None:
            return None
        return self.stop_table.gather(1, token[:, None]).squeeze(1)

    def keep(self, keep: torch.Tensor) -> None:
        """Only the live rows at positions ``keep`` go on."""
        self.all_rows = False
        self.rows, self.max_new = self.rows[keep], self.max_new[keep]
        self.min_budget = int(self.max_new.min())
        if self.greedy is not None:
            self.greedy = self.greedy[keep]
        if self.temps is not None:
            self.temps = self.temps[keep]
        if self.top_p is not None:
            self.top_p = self.top_p[keep]
        if self.stop_table is not None:
            self.stop_table = self.stop_table[keep]


class _Uniforms:
    """Each sampled row's uniforms, one float64 per token, from its own ``torch.Generator``
    (the same numbers on any device), drawn ``BLOCK`` tokens' worth per call, so token ``k``
    of a row uses the ``k``-th uniform of its stream whatever its batch's budget. Rows of
    greedy requests draw nothing (zeros). The table's rows follow the live batch
    (:meth:`keep`)."""

    BLOCK = 64

    def __init__(
        self, seeds: Sequence[int | None], steps: int, device: torch.device | None = None
    ) -> None:
        """``device``: where the generators draw (None: the CPU)."""
        device = torch.device("cpu") if device is None else device
        width = -(-max(steps, 1) // self.BLOCK) * self.BLOCK
        self.table = torch.zeros((len(seeds), width), dtype=torch.float64, device=device)
        self.sampled = False
        for row, seed in enumerate(seeds):
            if seed is None:
                continue
            self.sampled = True
            stream = generator(seed, device)
            for start in range(0, width, self.BLOCK):
                self.table[row, start : start + self.BLOCK].uniform_(generator=stream)

    def keep(self, keep: torch.Tensor) -> None:
        """Only the live rows at positions ``keep`` go on."""
        self.table = self.table[keep.to(self.table.device)]

    def at(self, step: int) -> torch.Tensor | None:
        """The live rows' ``[rows]`` uniforms for token ``step`` (None: every row is greedy)."""
        return self.table[:, step] if self.sampled else None
