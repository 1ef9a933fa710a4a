"""The most variance any critic can explain on a policy's own rollouts, by Monte Carlo.

PPO's critic is scored by the explained variance of its values against the returns over
action tokens, ``1 - Var(R - V) / Var(R)``; with ``value_lam = 1`` and one reward at the end,
every token's return is the episode's reward ``R``. The function that minimises the squared
error is the policy's exact value, ``V(s) = P(correct | prefix s)``, so its explained variance
is a ceiling for every critic, whatever its size or training. :func:`ceiling_batch` estimates
it on one batch of the policy's samples: for every action token of every sampled response it
samples ``m`` continuations of the prefix before that token (same policy, temperature, stop
tokens and remaining budget as the rollout), grades each with the environment, and takes the
fraction correct as ``V``. That estimate's own sampling noise adds ``V(1 - V) / m`` to the
squared error on average; its unbiased estimate ``p(1 - p) / (m - 1)`` per prefix is
subtracted.

Beside it, two references a critic can be read against: each prompt's exact success rate held
for the whole response (the exact prompt-level value: a perfect group baseline), and RLOO's
real baseline, the mean reward of the response's K - 1 group mates (a group mean that
includes the response itself would be R's rescaled residual, not a baseline). Every figure has
a 95% bootstrap interval over the batch's prompts.

Given a learned critic (``critic``: a function from an episode's tokens to the value before each
of them, as PPO's value model computes it; :func:`critic_from_checkpoint` loads one from a PPO
checkpoint), its explained variance is measured on the same scored tokens of the same fresh
batch, with its share of the exact value's, each with its interval over the same resamples:
a critic read against its ceiling on identical data it never trained on.
:func:`pooled_figures` pools several batches' scored tokens into one figure each.

A single-turn env continues a prefix with one generation; a multi-turn one continues it to the
episode's end on a fork of the env at the prefix's turn (:func:`ceiling_batch`). The benchmark
(:func:`measure_ceilings`) measures it on fresh prompts at the warm start and at the end of
PPO's first reported seed; ``benchmarks/critic_ceiling.py`` runs it on any model.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from forkgym.agents.seeds import keyed_generator

__all__ = [
    "FIGURES",
    "ceiling_batch",
    "ceiling_table",
    "critic_from_checkpoint",
    "measure_ceilings",
    "pooled_figures",
]

# (key, what it is, the value column, the noise column taken out of the squared error)
FIGURES: tuple[tuple[str, str, str, str | None], ...] = (
    ("exact_value", "the exact value P(correct \\| prefix)", "v", "noise"),
    ("exact_value_uncorrected", "the same, uncorrected (m continuations' mean)", "v", None),
    ("prompt_value", "each prompt's exact success rate (a perfect group baseline)", "pv", "pnoise"),
    ("rloo_baseline", "RLOO's baseline: the mean of the K - 1 group mates", "loo", None),
)
CRITIC_FIGURES: tuple[tuple[str, str, str, str | None], ...] = (
    ("critic", "the learned critic (PPO's value model)", "c", None),
)
CEILING_SEED = 30_000  # the ceiling's prompts: a train-side stream no run draws


def _grade(env: Any, tokenizer: Any, task_id: str, ids: list[int], stops: tuple[int, ...], stopped: bool) -> float:  # fmt: skip
    """The reward the rollout would record for this response."""
    env.reset(options={"task_id": task_id})
    if not stopped:
        return env.truncate("max_tokens")[4]["outcome"].reward
    content = ids[:-1] if ids and ids[-1] in stops else ids
    return env.step(tokenizer.decode(content, skip_special_tokens=False))[4]["outcome"].reward


def _scored_positions(ep: Any, stride: int) -> list[int]:
    """Indices (into the episode's tokens) of the action tokens whose prefix is scored: every
    ``stride``-th of each turn, the turn's first included."""
    out, run = [], 0
    for i, a in enumerate(ep.action_mask):
        if not a:
            run = 0
            continue
        if run % stride == 0:
            out.append(i)
        run += 1
    return out


def _single_turn(policy: Any, tokenizer: Any, env: Any, ep: Any, m: int, seed: int, batch: int, g: int, max_new_tokens: int, stride: int) -> list[list[float]]:  # fmt: skip
    """Each scored prefix of a one-turn episode, continued ``m`` times by one generation."""
    from forkgym.agents.generation.backends.policy import GenerationRequest, SamplingParams
    from forkgym.agents.generation.rollout import stop_token_ids
    from forkgym.agents.seeds import request_seed

    stops = stop_token_ids(tokenizer)
    actions = ep.token_ids[ep.prompt_len :]
    scored = [i - ep.prompt_len for i in _scored_positions(ep, stride)]
    requests = [  # the state before action token j, continued m times
        GenerationRequest(
            tuple(ep.token_ids[: ep.prompt_len + j]),
            SamplingParams(
                max_new_tokens=max_new_tokens - j,
                temperature=1.0,
                stop_token_ids=stops,
                seed=request_seed(seed, "ceiling", batch, g, ep.branch, j, c),
            ),
        )
        for j in scored
        for c in range(m)
    ]
    outs = policy.generate(requests)
    return [
        [
            _grade(
                env,
                tokenizer,
                ep.task_id,
                actions[:j] + list(o.token_ids),
                stops,
                o.finish_reason == "stop",
            )
            for o in outs[n * m : (n + 1) * m]
        ]
        for n, j in enumerate(scored)
    ]


def _continued(runner: Any, task_seed: int, ep: Any, m: int, batch: int, g: int, stride: int) -> list[list[float]]:  # fmt: skip
    """Each scored prefix of a multi-turn episode, continued ``m`` times to the episode's end
    from a fork of the env at the start of the prefix's turn."""
    if ep.branch >= 100 or len(ep.token_ids) > 10_000:
        raise ValueError("the ceiling keys continuations for K < 100 and episodes under 10,000 tokens")  # fmt: skip
    positions = _scored_positions(ep, stride)
    starts = runner.starts_within(ep, task_seed, positions, copies=m, key=lambda i: (g * 100 + ep.branch) * 10_000 + i)  # fmt: skip
    scores = [e.reward if e.reward is not None else 0.0 for e in runner.finish(starts, "ceiling", batch)]  # fmt: skip
    return [scores[n * m : (n + 1) * m] for n in range(len(positions))]


def _bootstrap_span(point: float, resampled: list[float]) -> dict[str, float | None]:
    """``{"point", "low", "high"}``: the 95% percentile interval of the resampled figures
    (undefined ones left out); None where the point or every resample is undefined."""
    boot = sorted(x for x in resampled if x == x)
    low, high = (boot[int(0.025 * len(boot))], boot[int(0.975 * len(boot)) - 1]) if boot else (None, None)  # fmt: skip
    return {"point": None if point != point else point, "low": low, "high": high}


def _ratio(a: float, b: float) -> float:
    return a / b if b == b and b > 0 and a == a else math.nan


def critic_from_checkpoint(folder: str | Path) -> Callable[[list[int]], list[float]]:
    """PPO's value model from a checkpoint (``algorithm.pt`` beside the policy's weights), as a
    function from an episode's tokens to the value before each token (0 before the first).
    The value model's kind (its own trunk or a head on the policy's) is read from its keys."""
    from forkgym.agents.advantages.ppo import SharedValueHead, ValueModel
    from forkgym.agents.models import load_policy_model

    state = torch.load(Path(folder) / "algorithm.pt", weights_only=True)
    if "value" not in state:
        raise ValueError(f"{folder}: algorithm.pt holds no value model (not a PPO checkpoint)")
    policy, _ = load_policy_model(str(folder))
    kind = ValueModel if any(k.startswith("trunk.") for k in state["value"]) else SharedValueHead
    value = kind(policy)
    value.load_state_dict(state["value"])
    value.eval()

    @torch.no_grad()
    def values(token_ids: list[int]) -> list[float]:
        ids = torch.tensor([token_ids])
        return value(ids, torch.ones_like(ids))[0].tolist()

    return values


def ceiling_batch(
    policy: Any,
    tokenizer: Any,
    env_id: str,
    env_kwargs: dict[str, Any],
    *,
    max_new_tokens: int,
    prompts: int,
    k: int,
    m: int,
    seed: int,
    batch: int,
    bootstrap: int = 1000,
    stride: int = 1,
    critic: Callable[[list[int]], list[float]] | None = None,
) -> dict[str, Any]:
    """One batch of fresh train-side prompts (stream ``seed``, step ``batch``): every figure of
    :data:`FIGURES` as ``{"point", "low", "high"}`` (None where undefined), with the batch's
    size, accuracy and the number of continuations.

    Single-turn envs continue each prefix with one generation. Multi-turn envs continue it to
    the episode's end (:meth:`~forkgym.agents.generation.rollout.Rollouts.finish`): the env replayed to the
    start of the prefix's turn and forked once per continuation, the tool results of the
    continuation's own turns real. ``stride`` > 1 scores every ``stride``-th action token of
    each turn (its first included) instead of every one: an unbiased subsample of the pooled
    tokens at a fraction of the continuations. With ``critic``, its figures too (the
    ``critic`` row and ``critic_share``, its explained variance over the exact value's)."""
    import gymnasium as gym

    import forkgym.envs  # noqa: F401 - registers the environments
    from forkgym.agents.generation.rollout import Rollouts
    from forkgym.agents.seeds import task_seeds
    from forkgym.envs.base import on_side

    env_kwargs = on_side(env_kwargs, "train")
    runner = Rollouts(lambda: gym.make(env_id, **env_kwargs), policy, tokenizer, k=k,
                      max_new_tokens=max_new_tokens, temperature=1.0, seed=seed)  # fmt: skip
    rollouts = runner.collect(task_seeds(seed, "train", batch, prompts))
    env = gym.make(env_id, **env_kwargs)
    multi_turn = int(getattr(env.unwrapped, "max_turns", 1)) > 1
    rows: dict[str, list[float]] = {c: [] for c in ("r", "v", "noise", "pv", "pnoise", "loo", "c", "prompt")}  # fmt: skip
    continuations = 0
    for g, group in enumerate(rollouts.groups):
        valid = [ep for ep in group.sampled if ep.valid]
        total = sum(ep.reward for ep in valid)
        for ep in valid:
            if multi_turn:
                scores_per_prefix = _continued(runner, group.task_seed, ep, m, batch, g, stride)
            else:
                scores_per_prefix = _single_turn(policy, tokenizer, env, ep, m, seed, batch, g, max_new_tokens, stride)  # fmt: skip
            continuations += sum(len(x) for x in scores_per_prefix)
            loo = (total - ep.reward) / (len(valid) - 1) if len(valid) > 1 else math.nan
            first = len(rows["v"])
            if critic is not None:
                values = critic(list(ep.token_ids))
                rows["c"] += [values[i] for i in _scored_positions(ep, stride)]
            for scores in scores_per_prefix:
                p = sum(scores) / m
                var = sum((s - p) ** 2 for s in scores) / (m - 1)
                rows["r"].append(ep.reward)
                rows["v"].append(p)
                rows["noise"].append(var / m)
                rows["pv"].append(rows["v"][first])  # the value before the first token
                rows["pnoise"].append(rows["noise"][first])
                rows["loo"].append(loo)
                rows["prompt"].append(g)
    env.close()
    t = {c: torch.tensor(v, dtype=torch.float64) for c, v in rows.items()}

    def ev(index: torch.Tensor, value: str, noise: str | None) -> float:
        r, v = t["r"][index], t[value][index]
        var_r = float(r.var(unbiased=False)) if len(r) else 0.0
        if var_r == 0 or bool(torch.isnan(v).any()):
            return math.nan
        residual = float(((r - v) ** 2).mean())
        if noise is not None:
            residual -= float(t[noise][index].mean())
        return 1 - residual / var_r

    everything = torch.arange(len(rows["r"]))
    by_prompt = [everything[t["prompt"] == g] for g in sorted(set(rows["prompt"]))]
    gen = keyed_generator(seed, "ceiling-bootstrap", batch)
    draws = [torch.randint(len(by_prompt), (len(by_prompt),), generator=gen) for _ in range(bootstrap if by_prompt else 0)]  # fmt: skip
    resamples = [torch.cat([by_prompt[i] for i in draw]) for draw in draws]
    if critic is None:
        del t["c"]

    def span(score: Callable[[torch.Tensor], float]) -> dict[str, float | None]:
        return _bootstrap_span(score(everything), [score(i) for i in resamples])

    figures: dict[str, Any] = {}
    for key, _, value, noise in FIGURES + (CRITIC_FIGURES if critic is not None else ()):
        figures[key] = span(lambda i, value=value, noise=noise: ev(i, value, noise))
    if critic is not None:  # the critic's share of what the exact value explains
        figures["critic_share"] = span(lambda i: _ratio(ev(i, "c", None), ev(i, "v", "noise")))
    sums = []  # per prompt: what pooling batches needs (:func:`pooled_figures`)
    for index in by_prompt:
        r = t["r"][index]
        entry = {"n": len(index), "r": float(r.sum()), "r2": float((r**2).sum()),
                 "v": float(((r - t["v"][index]) ** 2).sum()), "noise": float(t["noise"][index].sum())}  # fmt: skip
        if critic is not None:
            entry["c"] = float(((r - t["c"][index]) ** 2).sum())
        sums.append(entry)
    return {
        "batch": batch,
        "responses": int(rollouts.valid.sum()),
        "accuracy": float(rollouts.correct.float().mean()),
        "action_tokens": sum(
            sum(ep.action_mask) for g in rollouts.groups for ep in g.sampled if ep.valid
        ),
        "scored_tokens": len(rows["r"]),
        "continuations": continuations,
        "figures": figures,
        "prompt_sums": sums,
    }


def _pooled_ev(sums: list[dict[str, float]], key: str, noise: bool) -> float:
    n = sum(x["n"] for x in sums)
    if n == 0:
        return math.nan
    mean = sum(x["r"] for x in sums) / n
    var_r = sum(x["r2"] for x in sums) / n - mean**2
    if var_r <= 1e-12 * max(1.0, mean**2):  # equal rewards, up to rounding: undefined
        return math.nan
    residual = sum(x[key] - (x["noise"] if noise else 0.0) for x in sums) / n
    return 1 - residual / var_r


def pooled_figures(batches: list[dict[str, Any]], bootstrap: int = 1000, seed: int = 0) -> dict[str, Any]:  # fmt: skip
    """The exact value's explained variance (noise taken out) and, where a critic was read, the
    critic's and its share, over every scored token of ``batches`` (results of
    :func:`ceiling_batch`) pooled: one variance of the reward over all of them, so a batch
    whose rewards barely vary weighs as little as it says. Each figure ``{"point", "low",
    "high"}`` (None where undefined), the interval a 95% bootstrap over all the batches'
    prompts."""
    sums = [x for b in batches for x in b["prompt_sums"]]
    scores: dict[str, Callable[[list[dict[str, float]]], float]] = {
        "exact_value": lambda s: _pooled_ev(s, "v", True)
    }
    if sums and all("c" in x for x in sums):
        scores["critic"] = lambda s: _pooled_ev(s, "c", False)
        scores["critic_share"] = lambda s: _ratio(_pooled_ev(s, "c", False), _pooled_ev(s, "v", True))  # fmt: skip
    gen = keyed_generator(seed, "ceiling-bootstrap-pooled")
    draws = [torch.randint(len(sums), (len(sums),), generator=gen).tolist() for _ in range(bootstrap if sums else 0)]  # fmt: skip
    return {
        key: _bootstrap_span(score(sums), [score([sums[i] for i in d]) for d in draws])
        for key, score in scores.items()
    }


def measure_ceilings(
    out: Path,
    regime: Any,
    warm_model: str,
    ppo_run: Path,
    log: Callable[[str], None],
    *,
    batches: int = 2,
    m: int = 8,
    stride: int = 1,
) -> dict[str, Any]:
    """The ceiling of ``regime`` (cached in ``OUT/REGIME/ceiling.json``) at the warm start and
    at the end of the ``ppo`` run in ``ppo_run`` (its last checkpoint): ``batches`` batches of
    ``regime.ceiling_prompts`` fresh prompts each, ``m`` continuations per prefix, every
    ``stride``-th action token of a turn scored."""
    from forkgym.agents.generation.backends.hf_policy import HFPolicy
    from forkgym.agents.models import load_policy_model

    path = out / regime.name / "ceiling.json"
    if path.exists():
        return json.loads(path.read_text())
    checkpoints = sorted((ppo_run / "checkpoints").glob("step_*[0-9]"))
    models = {"warm start": warm_model}
    if checkpoints:
        models[f"after {ppo_run.name} ({checkpoints[-1].name})"] = str(checkpoints[-1])
    result: dict[str, Any] = {"m": m, "prompts": regime.ceiling_prompts, "k": regime.k, "stride": stride, "policies": {}}  # fmt: skip
    for name, folder in models.items():
        t0 = time.perf_counter()
        model, tokenizer = load_policy_model(folder)
        model.eval()
        policy = HFPolicy(model, tokenizer, seed=CEILING_SEED)
        shape = dict(max_new_tokens=regime.max_new_tokens, prompts=regime.ceiling_prompts, k=regime.k, m=m, stride=stride)  # fmt: skip
        per_batch = []
        for b in range(batches):
            per_batch.append(ceiling_batch(policy, tokenizer, regime.env, regime.env_kwargs, seed=CEILING_SEED, batch=b, **shape))  # fmt: skip
        result["policies"][name] = {"batches": per_batch, "seconds": time.perf_counter() - t0}
        exact = [b["figures"]["exact_value"]["point"] for b in per_batch]
        log(f"  critic ceiling, {name}: exact value's explained variance {exact} ({time.perf_counter() - t0:.0f} s)")  # fmt: skip
    path.write_text(json.dumps(result, indent=1))
    return result


def _span(f: dict[str, Any]) -> str:
    if f["point"] is None:
        return "undefined"
    if f["low"] is None:
        return f"{f['point']:.3f}"
    return f"{f['point']:.3f} [{f['low']:.3f}, {f['high']:.3f}]"


def ceiling_table(out: Path, regime: Any, critics: dict[str, list[dict[str, float]]]) -> list[str]:
    """The report's lines comparing the learned critics' explained variance on fresh batches
    (each step's, measured before the critic trains on it) with the exact value and the exact
    prompt-level value (nothing when the ceiling was not measured)."""
    from .stats import interval

    path = out / regime.name / "ceiling.json"
    if not path.exists():
        return []
    record = json.loads(path.read_text())
    policies = record["policies"]
    headers = [
        f"{name} (batch {b['batch']}, accuracy {b['accuracy']:.2f})"
        for name, p in policies.items()
        for b in p["batches"]
    ]
    lines = [
        f"The critics against their references, every figure an explained variance over action "
        f"tokens against the 0/1 reward. References by Monte Carlo ({record['m']} continuations "
        f"per prefix, noise-corrected) on fresh batches of {record['prompts']} train-side prompts "
        f"x K = {record['k']}, each with a 95% bootstrap interval over the batch's prompts; the "
        "critics' figures are their own logged values on each step's fresh batch (before they "
        "train on it), the mean over the first / last quarter of steps, with a 95% interval over "
        "seeds.",
        "",
        "| | " + " | ".join(headers) + " |",
        "|---|" + "---|" * sum(len(p["batches"]) for p in policies.values()),
    ]
    for key, what, _, _ in FIGURES:
        cells = [_span(b["figures"][key]) for p in policies.values() for b in p["batches"]]
        lines.append(f"| {what} | " + " | ".join(cells) + " |")
    lines.append("")
    for method, runs in critics.items():
        quarters = []
        for which in ("first", "last"):
            values = [r.get(f"explained_variance_{which}") for r in runs]
            values = [v for v in values if v is not None and v == v]
            quarters.append(f"{which} quarter {interval(values) if values else 'undefined'}")
        lines.append(f"- {method}'s critic on fresh batches: {', '.join(quarters)}.")
    return [*lines, ""]
