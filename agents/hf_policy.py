"""The :class:`~forkgym.agents.policy.Policy` on Hugging Face transformers: batched, KV-cached.

``model.generate`` cannot take a temperature, a top-p and a seed per request in one batch,
so :class:`HFPolicy` runs its own decode loop on ``model(...)``:

* prompts are left-padded into one batch, with an attention mask and position ids counted
  from each row's first real token (so padding changes nothing but float rounding);
* one prefill forward of each distinct prompt (logits of the last position only; a group's
  K requests share one, and its KV cache is indexed out to their rows), then one forward per
  new token on the growing KV cache (a transformers ``DynamicCache``, passed as ``cache=``,
  the 5.x name; ``past_key_values=`` for models whose ``forward`` predates it);
* rows that finish (a stop token, or their own ``max_new_tokens``) leave the batch and the KV
  cache at once (``Cache.batch_select_indices``), so short answers stop costing compute;
* sampling is vectorised over rows: log-softmax of ``logits / T`` per row, the top-p nucleus
  from one sort, and Gumbel-max with per-row noise.

**Determinism.** Each sampled row draws its Gumbel noise from its own ``torch.Generator``
(on the CPU by default, so the same noise on any device; ``noise_device="model"`` draws it
where the model runs, which a GPU does in a fraction of the time the CPU needs for a large
vocabulary, with the device's own random stream), seeded with the request's seed (or, for a request without one, with a seed drawn from the
policy's own generator, ``HFPolicy(seed=...)``, in request order; torch's global RNG is never
used). The ``k``-th token of a row uses exactly the ``k``-th block of ``V`` uniforms of its
stream, whatever else is in the batch and however long the other rows run (they are drawn
several tokens' worth per call, which gives the same numbers). So the same
request with the same seed and weights gives the same tokens alone or in any batch, up to float
rounding of the logits under different padding (which can only matter when two perturbed
scores tie to ~1e-6). Greedy rows use no randomness.

**Log-probs** follow :mod:`forkgym.agents.policy`: ``log_softmax(logits / T)`` over the full
vocabulary, at the request's temperature (``T = 1`` for greedy), never renormalised over the
nucleus; :mod:`forkgym.agents.logprobs` computes the same quantity with gradients for the
learner.

**Weights.** ``sync_weights(weights)`` takes the trainer's model (or a state dict): a policy
built on that very module (the ``transformers`` backend's default, ``share_model=True``) has
nothing to copy and only moves its version; a policy on a separate copy loads the weights.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import torch

from .logprobs import position_ids_from_mask, token_logprobs
from .padding import pad_sequences, padding_mask
from .policy import Generation, GenerationRequest, check_scoring, request_seeds
from .prefix_sharing import accepts_logits_to_keep, cache_argument

__all__ = ["HFPolicy"]


# -- the policy ---------------------------------------------------------------------------------

_STOP, _LENGTH = 1, 2


class HFPolicy:
    """A transformers causal LM behind the :class:`~forkgym.agents.policy.Policy` protocol.

    ``model`` may be the trainer's own module (``sync_weights`` then copies nothing and bumps
    the version) or a separate copy that loads the trainer's weights in ``sync_weights``. ``max_batch`` rows are decoded together at most (longer
    request lists are split after sorting by prompt length, which only saves padding);
    :meth:`logprobs` also keeps each forward's ``[rows, width, vocab]`` logits under
    ``max_logit_elements`` (2**26 floats, 256 MB: 65,536 tokens of a 1,024-token vocabulary,
    441 of Qwen's 151,936). ``seed`` seeds the stream that gives unseeded sampled requests
    their seeds. ``share_prefill=False`` prefills every request's prompt on its own (the
    tokens are the same; it exists to measure what sharing saves).
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
    ) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
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
        self._seed_stream = torch.Generator().manual_seed(seed)
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
                for start in range(0, len(order), self.max_batch):
                    chunk = order[start : start + self.max_batch]
                    outs = self._generate_batch(
                        [requests[i] for i in chunk], [seeds[i] for i in chunk]
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

    def _new_cache(self) -> Any:
        from transformers import DynamicCache

        return DynamicCache(config=self.model.config)

    def _generate_batch(
        self, requests: list[GenerationRequest], seeds: list[int | None]
    ) -> list[Generation]:
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

        greedy = torch.tensor([p.greedy for p in params], device=dev)
        temps = torch.tensor([1.0 if p.greedy else p.temperature for p in params], device=dev)
        top_p = torch.tensor([1.0 if p.greedy else p.top_p for p in params], device=dev)
        max_new = torch.tensor([p.max_new_tokens for p in params], device=dev)
        noise = _Noise(
            seeds, self._vocab_size(), device=dev if self.noise_device == "model" else None
        )
        steps = max(p.max_new_tokens for p in params)

        cache = self._new_cache()
        logits = self._forward(ids.to(dev), mask.to(dev), pos.to(dev), cache)
        if len(prompts) < n:
            index = torch.tensor(row_prompt, device=dev)
            cache.batch_select_indices(index)
            logits, mask, pos = logits[index], mask[index.cpu()], pos[index.cpu()]
        vocab = logits.shape[-1]
        stop_table: torch.Tensor | None = None
        if any(p.stop_token_ids for p in params):
            stop_table = torch.zeros((n, vocab), dtype=torch.bool)
            for row, p in enumerate(params):
                stop_table[row, list(p.stop_token_ids)] = True
            stop_table = stop_table.to(dev)

        tokens = torch.zeros((n, steps), dtype=torch.long, device=dev)
        logps = torch.zeros((n, steps), dtype=torch.float32, device=dev)
        n_tokens = torch.zeros(n, dtype=torch.long, device=dev)
        finish = torch.zeros(n, dtype=torch.long, device=dev)
        alive = torch.arange(n, device=dev)  # original row of each row of the live batch
        alive_list = list(range(n))
        mask = mask.to(dev)
        next_pos = pos[:, -1].to(dev) + 1
        need_top_p = any(not p.greedy and p.top_p < 1.0 for p in params)

        for step in range(steps):
            token, logp = self._pick(
                logits,
                temps[alive],
                top_p[alive] if need_top_p else None,
                greedy[alive],
                noise.uniforms(alive_list, step),
            )
            tokens[alive, step] = token
            logps[alive, step] = logp
            stopped = (
                stop_table[alive, token]
                if stop_table is not None
                else torch.zeros_like(token, dtype=torch.bool)
            )
            at_length = max_new[alive] <= step + 1
            done = stopped | at_length
            finish[alive] = torch.where(stopped, _STOP, torch.where(at_length, _LENGTH, 0))
            n_tokens[alive] = step + 1
            if bool(done.all()):
                break
            if bool(done.any()):  # finished rows leave the batch and the cache
                keep = (~done).nonzero().squeeze(1)
                cache.batch_select_indices(keep)
                alive, token, mask, next_pos = alive[keep], token[keep], mask[keep], next_pos[keep]
                alive_list = alive.tolist()
            mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=1)
            logits = self._forward(token[:, None], mask, next_pos[:, None], cache)
            next_pos = next_pos + 1

        tokens_l, logps_l = tokens.cpu().tolist(), logps.cpu().tolist()
        counts, finishes = n_tokens.cpu().tolist(), finish.cpu().tolist()
        return [
            Generation(
                token_ids=tuple(tokens_l[row][: counts[row]]),
                logprobs=tuple(logps_l[row][: counts[row]]),
                finish_reason="stop" if finishes[row] == _STOP else "length",
            )
            for row in range(n)
        ]

    def _pick(
        self,
        logits: torch.Tensor,
        temps: torch.Tensor,
        top_p: torch.Tensor | None,
        greedy: torch.Tensor,
        uniforms: tuple[list[int], torch.Tensor] | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Next token and its log-prob (full vocabulary, at the row's temperature) per row;
        ``uniforms``: the sampled rows (positions in the batch) and their ``[rows, V]`` noise."""
        logp = torch.log_softmax(logits / temps[:, None], dim=-1)
        if uniforms is None:
            token = logits.argmax(-1)
        else:
            sampled_rows, u = uniforms
            scores = logp
            if top_p is not None:  # the smallest prefix of the sorted vocabulary with mass >= p
                sorted_logp, order = logp.sort(dim=-1, descending=True)
                probs = sorted_logp.exp()
                outside = (probs.cumsum(-1) - probs) >= top_p[:, None]
                outside &= (top_p < 1.0)[:, None]
                scores = logp.masked_fill(outside.scatter(1, order, outside), float("-inf"))
            gumbel = -torch.log(-torch.log(u.to(logits.device)))
            if len(sampled_rows) < logits.shape[0]:
                gumbel = torch.zeros_like(logp).index_copy_(
                    0, torch.tensor(sampled_rows, device=logits.device), gumbel
                )
            token = torch.where(greedy, logits.argmax(-1), (scores + gumbel).argmax(-1))
        return token, logp.gather(1, token[:, None]).squeeze(1)


class _Noise:
    """Each sampled row's uniforms from its own CPU ``torch.Generator`` (the same noise on any
    device), drawn ``block`` tokens' worth at a time: one call per row per block instead of one
    per token. Drawing ``n * V`` at once gives the same numbers as ``n`` draws of ``V``, so
    token ``k`` of a row still uses the ``k``-th block of ``V`` uniforms of its stream."""

    def __init__(
        self,
        seeds: Sequence[int | None],
        vocab: int,
        block: int = 8,
        max_floats: int = 2**22,
        device: torch.device | None = None,
    ) -> None:
        """``device``: where the generators draw (None: the CPU); an accelerator's buffer may
        hold 32 times as many floats."""
        device = torch.device("cpu") if device is None else device
        if device.type != "cpu":
            max_floats *= 32
        self.device = device
        self.generators = [
            None if s is None else torch.Generator(device=device).manual_seed(s) for s in seeds
        ]
        # at most `max_floats` buffered (16 MB on the CPU): a 152k vocabulary draws one token
        # at a time there
        self.block = max(1, min(block, max_floats // max(len(seeds) * vocab, 1)))
        self.vocab = vocab
        self.buffer = torch.empty((len(seeds), self.block, vocab), device=device)

    def uniforms(self, rows: list[int], step: int) -> tuple[list[int], torch.Tensor] | None:
        """For the live ``rows`` (original indices) at token ``step``: which positions in the
        batch sample, and their ``[sampled, V]`` uniforms (None: every row is greedy)."""
        positions = [i for i, r in enumerate(rows) if self.generators[r] is not None]
        if not positions:
            return None
        sampled = [rows[i] for i in positions]
        if step % self.block == 0:  # live rows now were live at every earlier step
            fresh = [torch.rand(self.block * self.vocab, generator=self.generators[r], device=self.device) for r in sampled]  # fmt: skip
            self.buffer[sampled] = torch.stack(fresh).view(len(sampled), self.block, self.vocab)
        return positions, self.buffer[sampled, step % self.block]
