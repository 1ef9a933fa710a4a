"""The benchmark's report: ``report.md`` (tables with 95% intervals over seeds, the verdict of
each regime) and PNG plots, all read back from the run folders (nothing is kept in memory, so
a resumed benchmark reports exactly as an uninterrupted one)."""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import sys
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from .ceiling import ceiling_table
from .cells import read_last_outcomes, read_steps
from .held_out import distinct_problems, overlap
from .methods import resolve_method
from .paired import paired_compare, paired_min_detectable, seeds_needed, variance_parts
from .plateau import Plateau, budget_lines, find_plateau
from .presets import Preset, Regime
from .stats import Comparison, compare, difference, holm, interval, min_detectable
from .summary import RunSummary
from .tuning import label, swept, tuning_table
from .vine_error import vine_error_table

__all__ = [
    "RunSummary",
    "anchor_lines",
    "check_report",
    "plan_lines",
    "summarise",
    "verdict",
    "write_report",
]

_GROUPS = ("all_correct", "all_wrong", "mixed", "under_filled")
_PHASES = ("generate", "env_and_verify", "reward", "adv", "forward_and_loss", "backward", "optimizer", "sync")  # fmt: skip


def _mean(rows: list[dict[str, Any]], key: str) -> float:
    xs = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
    return statistics.fmean(xs) if xs else math.nan


def _first_and_last(
    rows: list[dict[str, Any]], prefix: str, keys: tuple[str, ...]
) -> dict[str, float]:
    """Each ``prefix/key``'s mean over the first and the last quarter of a run's rows (empty
    when the run did not log ``prefix/explained_variance``)."""
    if not any(f"{prefix}/explained_variance" in r for r in rows):
        return {}
    quarter = max(1, len(rows) // 4)
    out = {}
    for key in keys:
        out[f"{key}_first"] = _mean(rows[:quarter], f"{prefix}/{key}")
        out[f"{key}_last"] = _mean(rows[-quarter:], f"{prefix}/{key}")
    return out


def _anchor_sums(rows: list[dict[str, Any]]) -> dict[str, float]:
    """GiGPO's anchor-group statistics summed over the steps that logged them (``{}`` for a run
    of any other method): the per-step means, and the text-matched groups with how many of them
    mixed exact states (each step's fraction times its count), so seeds pool by plain sums."""
    logged = [r for r in rows if isinstance(r.get("gigpo/anchor_fraction"), (int, float))]
    if not logged:
        return {}
    out = {"steps": float(len(logged))}
    for key in ("anchor_fraction", "anchor_size_mean", "step_adv_abs_mean", "text_groups"):
        out[key] = float(sum(r.get(f"gigpo/{key}") or 0.0 for r in logged))
    out["text_mixed"] = float(sum((r.get("gigpo/text_groups") or 0.0) * (r.get("gigpo/text_mixed_fraction") or 0.0) for r in logged))  # fmt: skip
    return out


def summarise(folder: Path, method: str, seed: int, regime: Regime, start: float, fractions: tuple[float, ...]) -> RunSummary:  # fmt: skip
    rows = read_steps(folder)
    recorded = read_last_outcomes(folder)
    kind = resolve_method(method).kind
    budget = regime.budget_tokens
    x_key = "tokens_trained" if kind == "sft" else "tokens_generated"  # SFT generates nothing
    x = train_s = 0.0
    curve = [(0.0, 0.0, start)]
    lengths = []
    for r in rows:
        x += r.get(x_key) or 0
        train_s += r.get("time/step") or 0.0
        if r.get("eval_accuracy") is not None:
            curve.append((x, train_s, r["eval_accuracy"]))
        if r.get("diag/response_length_mean") is not None:
            lengths.append((x, r["diag/response_length_mean"]))
    at = {}
    for f in fractions:
        hit = [acc for tokens, _, acc in curve[1:] if tokens >= f * budget]
        at[f] = hit[0] if hit else math.nan
    critic = _first_and_last(rows, "critic", ("value_loss", "explained_variance"))
    if critic:
        critic["value_clip_frac"] = _mean(rows, "critic/value_clip_frac")
    vine = _first_and_last(rows, "vine", ("explained_variance",))
    strata: dict[str, float] = {}
    for key in {k for r in rows for k in r if k.startswith(("diag/adv/by_", "diag/loss/by_")) and k.endswith("/abs_mean")}:  # fmt: skip
        strata[key[len("diag/") : -len("/abs_mean")]] = _mean(rows, key)
    steps = [r.get("time/step") for r in rows if r.get("time/step") is not None]
    return RunSummary(
        method=method,
        seed=seed,
        kind=kind,
        budget=budget,
        start=start,
        at=at,
        curve=curve,
        tokens_generated=int(rows[-1].get("tokens_generated_total") or 0) if rows else 0,
        last_step_tokens=int(rows[-1].get("tokens_generated") or 0) if rows else 0,
        tokens_trained=int(sum(r.get("tokens_trained") or 0 for r in rows)),
        tokens_sampled=int(sum(r.get("gen/tokens_sampled") or 0 for r in rows)),
        tokens_accepted=int(sum(r.get("gen/tokens_accepted") or 0 for r in rows)),
        greedy_tokens=int(sum(r.get("tokens_generated_greedy") or 0 for r in rows)),
        value_tokens=int(sum(r.get("tokens_generated_values") or 0 for r in rows)),
        vine=vine,
        steps=len(rows),
        train_s=train_s,
        eval_s=sum(r.get("time/eval") or 0.0 for r in rows),
        s_per_step=statistics.fmean(steps[2:] or steps) if steps else math.nan,
        groups={g: _mean(rows, f"diag/{g}_of_groups") for g in _GROUPS},
        infra_failures=int(
            sum((r.get("infra_failures") or 0) + (r.get("eval_infra_failures") or 0) for r in rows)
        ),
        lengths=lengths,
        critic=critic,
        strata=strata,
        phases={
            p: _mean(rows, f"time/{p}") for p in _PHASES if any(f"time/{p}" in r for r in rows)
        },
        anchors=_anchor_sums(rows),
        outcomes=None if recorded is None else list(recorded["correct"]),
        task_seeds=None if recorded is None else list(recorded["task_seeds"]),
    )


def _collect(out: Path, preset: Preset) -> dict[str, tuple[dict[str, Any], dict[str, list[RunSummary]]]]:  # fmt: skip
    """regime name -> (warm start info, method -> its seeds' summaries), complete runs only."""
    found = {}
    for regime in preset.regimes:
        marker = out / regime.warm_dir / "warm" / "warm.json"
        if not marker.exists():
            continue
        warm = json.loads(marker.read_text())
        runs: dict[str, list[RunSummary]] = defaultdict(list)
        for done in sorted((out / regime.name).glob("*-seed*/done.json")):
            info = json.loads(done.read_text())
            runs[info["method"]].append(summarise(done.parent, info["method"], info["seed"], regime, warm["accuracy"], preset.eval_fractions))  # fmt: skip
        order = [m for m in regime.methods if m in runs] + sorted(m for m in runs if m not in regime.methods)  # fmt: skip
        found[regime.name] = (warm, {m: runs[m] for m in order})
    return found


def _fmt_int(x: float) -> str:
    return f"{x:,.0f}" if math.isfinite(x) else "-"


def _paired_outcomes(rs: list[RunSummary]) -> tuple[tuple[int, ...], torch.Tensor] | None:
    """A method's ``[seeds, tasks]`` per-task outcomes on one task list, with that list (None:
    some run recorded none, or its runs were evaluated on different tasks)."""
    lists = {tuple(r.task_seeds) for r in rs if r.task_seeds is not None}
    if len(lists) != 1 or any(r.outcomes is None for r in rs):
        return None
    return lists.pop(), torch.tensor([r.outcomes for r in rs], dtype=torch.float64)


def _compare(a: str, ra: list[RunSummary], b: str, rb: list[RunSummary], tasks: int) -> Comparison:
    """Paired over the same tasks (:func:`paired_compare`) when both methods recorded
    per-task outcomes on one task list; else the unpaired test (:func:`compare`)."""
    pa, pb = _paired_outcomes(ra), _paired_outcomes(rb)
    if pa is not None and pb is not None and pa[0] == pb[0]:
        c = paired_compare(pa[1], pb[1], key=(a, b))
        return Comparison(a, b, c.difference, c.se, math.inf, c.p)
    return compare(a, [r.final for r in ra], b, [r.final for r in rb], tasks)


def comparisons(runs: dict[str, list[RunSummary]], tasks: int) -> list[tuple[Comparison, float]]:
    """Every pair of methods (the higher mean first) with its Holm-adjusted p-value."""
    kept = {m: rs for m, rs in runs.items() if len(rs) >= 2}
    names = sorted(kept, key=lambda m: -statistics.fmean(r.final for r in kept[m]))
    pairs = [_compare(a, kept[a], b, kept[b], tasks) for i, a in enumerate(names) for b in names[i + 1 :]]  # fmt: skip
    return list(zip(pairs, holm([c.p for c in pairs]), strict=True))


def paired(runs: dict[str, list[RunSummary]]) -> bool:
    """Whether every method's runs recorded per-task outcomes on one shared task list."""
    lists = [_paired_outcomes(rs) for rs in runs.values() if rs]
    return bool(lists) and all(x is not None for x in lists) and len({x[0] for x in lists}) == 1  # type: ignore[index]


def verdict(runs: dict[str, list[RunSummary]], tasks: int) -> str:
    """Which method ends highest and which pairs are separated, by Holm-corrected tests over
    every pair, with the evaluation set's sampling error (``tasks`` held-out problems); where
    the evidence does not separate two methods it says so, never "on par"."""
    finals = {m: [r.final for r in rs] for m, rs in runs.items() if rs}
    if len(finals) < 2:
        return "fewer than two methods: nothing to compare."
    if any(len(xs) < 2 for xs in finals.values()):
        return "fewer than two seeds for some method: no test is possible."
    pairs = comparisons(runs, tasks)
    best = max(finals, key=lambda m: statistics.fmean(finals[m]))
    separated = [f"{c.a} above {c.b} ({c.d:+.3f}, Holm p = {ph:.3f})" for c, ph in pairs if ph < 0.05]  # fmt: skip
    lead = [(c, ph) for c, ph in pairs if c.a == best]
    text = f"highest mean final accuracy: **{best}** ({statistics.fmean(finals[best]):.3f} over {len(finals[best])} seeds). "  # fmt: skip
    if all(ph < 0.05 for _, ph in lead):
        text += "It is separated from every other method (Holm-corrected): it wins this regime. "
    else:
        text += "Its lead is not established (not separated, Holm-corrected) over: " + ", ".join(c.b for c, ph in lead if ph >= 0.05) + ". "  # fmt: skip
    text += f"Pairs separated at family-wise 5% over {len(pairs)} comparisons: " + ("; ".join(separated) or "none") + "; "  # fmt: skip
    text += "every other pair is not separated. "
    seeds = min(len(xs) for xs in finals.values())
    if paired(runs):  # the paired design's own standard errors
        mdd = paired_min_detectable(statistics.fmean(c.se for c, _ in pairs), len(pairs))
        how = "paired over the same tasks: a hierarchical bootstrap over seeds, then tasks"
    else:
        sds = [statistics.stdev(xs) for xs in finals.values()]
        mean_acc = statistics.fmean(x for xs in finals.values() for x in xs)
        mdd = min_detectable(statistics.fmean(sds), seeds, mean_acc, tasks, len(pairs))
        how = "unpaired: the seeds' spread plus each method's binomial task error"
    return text + f"With {seeds} seeds, {tasks} held-out tasks and {len(pairs)} comparisons ({how}), the smallest difference this design detects with 80% power is about {mdd:.3f} (normal approximation)."  # fmt: skip


def _pairs_table(runs: dict[str, list[RunSummary]], tasks: int) -> list[str]:
    covers = "paired bootstrap: seeds, then the same tasks" if paired(runs) else "seeds + tasks, unpaired"  # fmt: skip
    lines = [f"| pair | difference | standard error ({covers}) | uncorrected 95% interval | p | Holm p | verdict |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for c, ph in comparisons(runs, tasks):
        iv = c.interval()
        verdict_ = "separated" if ph < 0.05 else "not separated"
        lines.append(f"| {c.a} − {c.b} | {c.d:+.3f} | {c.se:.3f} | [{iv[1]:+.3f}, {iv[2]:+.3f}] | {c.p:.3f} | {ph:.3f} | {verdict_} |")  # fmt: skip
    return lines


def _table(regime: Regime, warm: dict[str, Any], runs: dict[str, list[RunSummary]], fractions: tuple[float, ...]) -> list[str]:  # fmt: skip
    marks = [f for f in fractions if f < 1]
    head = (
        ["method", "seeds", "final held-out", "gain"]
        + [f"@{f:.0%}" for f in marks]
        + ["area under the curve"]
    )
    head += ["generated (mean)", "budget kept", "sampled / accepted", "trained on", "train s", "s/step",
             "groups correct/wrong/mixed", "infra fail", "length first→last"]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for method, rs in runs.items():
        final = interval([r.final for r in rs])
        gain = interval([r.final - r.start for r in rs])
        cells = [method, str(len(rs)), str(final), f"{gain.mean:+.3f}"]
        cells += [str(interval([r.at[f] for r in rs])) for f in marks]
        cells.append(str(interval([r.auc for r in rs])))
        cells.append(_fmt_int(statistics.fmean(r.tokens_generated for r in rs)))
        cells.append("yes" if all(r.within_budget for r in rs) else "NO")
        if rs[0].kind == "rl":
            cells.append(f"{_fmt_int(statistics.fmean(r.tokens_sampled for r in rs))} / {_fmt_int(statistics.fmean(r.tokens_accepted for r in rs))}")  # fmt: skip
        else:
            cells.append("-")
        cells.append(_fmt_int(statistics.fmean(r.tokens_trained for r in rs)))
        cells.append(f"{statistics.fmean(r.train_s for r in rs):.1f}")
        cells.append(f"{statistics.fmean(r.s_per_step for r in rs):.3f}")
        g = [statistics.fmean(r.groups[k] for r in rs) for k in _GROUPS]
        if any(math.isnan(x) for x in g):
            cells.append("-")
        else:  # under-filled: fewer than 2 valid members (K = 1, or infrastructure failures)
            text = " / ".join(f"{x:.2f}" for x in g[:3])
            cells.append(text + (f" ({g[3]:.2f} under 2)" if g[3] > 0 else ""))
        cells.append(str(sum(r.infra_failures for r in rs)))
        first = [r.lengths[0][1] for r in rs if r.lengths]
        last = [statistics.fmean(v for _, v in r.lengths[-max(1, len(r.lengths) // 4) :]) for r in rs if r.lengths]  # fmt: skip
        cells.append(
            f"{statistics.fmean(first):.1f}→{statistics.fmean(last):.1f}" if first else "-"
        )
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _machine() -> str:
    import torch

    return (
        f"{platform.machine()}, {os.cpu_count()} CPU cores, torch {torch.__version__} "
        f"({torch.get_num_threads()} threads), Python {sys.version.split()[0]}"
    )


def write_report(
    out: str | Path, preset: Preset, *, log: Any = print, command: str | None = None
) -> Path:
    """``report.md`` and the plots from the finished runs in ``out``; ``command``: the command
    line to print (default: the preset's plain one)."""
    from .plots import plot_crossover, plot_regime

    out = Path(out)
    command = command or f"forkgym bench --preset {preset.name} --out {out}"
    found = _collect(out, preset)
    lines = [
        f"# forkgym bench: preset `{preset.name}`",
        "",
        f"Written {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC on {_machine()}.",
        f"Command: `{command}`. Held-out accuracy is greedy "
        f"pass@1 on {preset.eval_episodes} tasks held out by content (the eval side of the env's partition; "
        "every training prompt and demonstration is on its train side); intervals are 95% "
        "Student-t intervals of the mean over seeds. Every method of a regime starts from the same "
        "warm start and spends the same budget of generated tokens (every token: greedy branches, "
        "discarded groups, a critic's warm-up, rejected samples); SFT generates none and trains on "
        "as many gold tokens instead.",
        "",
    ]
    summary = ["## Verdicts", ""]
    body = []
    for regime in preset.regimes:
        if regime.name not in found:
            continue
        warm, runs = found[regime.name]
        pics = plot_regime(out, regime, runs, warm)
        summary.append(
            f"- **{regime.name}** ({regime.about}): {verdict(runs, preset.eval_episodes)}"
        )
        body += [
            f"## {regime.name}",
            "",
            f"{regime.about}. `{regime.env}` {json.dumps(regime.env_kwargs)}, K = {regime.k} x "
            f"{regime.prompts_per_step} prompts per step, at most {regime.max_new_tokens} new "
            f"tokens per turn, {_lr_words(regime, preset)}; budget {regime.budget_tokens:,} generated "
            f"tokens per run. Warm start: held-out {warm['accuracy']:.3f} after "
            f"{warm['sft_tokens']:,} SFT tokens.",
            "",
            *_table(regime, warm, runs, preset.eval_fractions),
            "",
            'Columns: every "±" is the half-width of a 95% t-interval over the seeds alone (the '
            "seeds' spread on the one fixed task list; the pairs below add the tasks' error); "
            "accuracy at each fraction of the budget is the evaluation at the first step "
            "that reached it; the *area under the curve* is the mean held-out accuracy over the "
            "budget (warm start at 0, trapezoids between evaluations); *generated* counts every token the generator produced, *budget kept* "
            "says it reached the budget and stopped at that step; *sampled / accepted* are "
            "the sampled-branch tokens and those in groups the step kept (dynamic sampling "
            "discards the rest; greedy tokens are in *generated* only); *trained on* is the "
            "tokens in the loss; *train s* excludes evaluations; group fractions are over the "
            "steps' groups (*under 2*: groups with fewer than two valid members, every group at "
            "K = 1); *length* is the mean response length over the first step and the "
            "last quarter of steps.",
            "",
            f"Every pair of methods, final held-out accuracy ({preset.eval_episodes} tasks on the "
            "eval side of the partition by meaning, none a training prompt or demonstration of "
            "any run, warm start included): paired over the same tasks where every run recorded "
            "its per-task outcomes (a hierarchical bootstrap over seeds, then tasks), else the "
            "seeds' spread (Welch) plus each side's binomial task error (the header says which); "
            "Holm's correction over all pairs decides *separated*; the uncorrected interval is "
            "shown beside it.",
            "",
            *_pairs_table(runs, preset.eval_episodes),
            "",
            "Held out by meaning (a problem's key: the operands of a commutative operation "
            "sorted, a whole chain, a question's normalised text): {eval_tasks} distinct held-out "
            "problems evaluated, {train_tasks} distinct problems among 10,000 train-side draws, "
            "overlap **{overlap}**; the task space holds {eval_problems} distinct eval-side and "
            "{train_problems} train-side problems (of 40,000 draws).".format(
                **overlap(regime, preset.eval_episodes), **distinct_problems(regime)
            ),
            "",
        ]
        body += tuning_table(out, regime, preset)
        critics = {m: rs for m, rs in runs.items() if rs and rs[0].critic}
        if critics:
            body += [
                "Learned critics (first and last quarter of steps):",
                "",
                "| method | value loss first → last | explained variance (last quarter) | value-clip fraction |",
                "|---|---|---|---|",
            ]
            for m, rs in critics.items():
                c = [r.critic for r in rs]
                ev = interval([x["explained_variance_last"] for x in c])
                body.append(
                    f"| {m} | {statistics.fmean(x['value_loss_first'] for x in c):.4f} → "
                    f"{statistics.fmean(x['value_loss_last'] for x in c):.4f} | {ev} | "
                    f"{statistics.fmean(x['value_clip_frac'] for x in c):.3f} |"
                )
            body.append("")
            body += ceiling_table(out, regime, {m: [r.critic for r in rs] for m, rs in critics.items()})  # fmt: skip
        body += _vine_lines(out, regime, runs)
        body += anchor_lines(runs)
        if "trl_grpo" in runs and "grpo" in runs:
            body += _trl_section(runs["grpo"], runs["trl_grpo"])
        body += [f"![{p.stem}]({p.relative_to(out).as_posix()})" for p in pics] + [""]
    if len(found) > 1:
        crossover = plot_crossover(out, preset, {name: runs for name, (_, runs) in found.items()})
        summary += ["", "Final held-out accuracy by regime and method (mean and 95% interval over seeds):", "", f"![crossover]({crossover.relative_to(out).as_posix()})"]  # fmt: skip
    if budgets := budget_lines(_budgets(preset, found)):
        summary += ["", "## Budget", "", *budgets]
    path = out / "report.md"
    path.write_text("\n".join(lines + summary + [""] + body) + "\n")
    log(f"report: {path}")
    return path


def _budgets(preset: Preset, found: dict[str, tuple[dict[str, Any], dict[str, list[RunSummary]]]]) -> list[Plateau]:  # fmt: skip
    """Each regime's budget verdict (:func:`find_plateau`), in the preset's order."""
    verdicts = [find_plateau(r.name, r.budget_tokens, found[r.name][1]) for r in preset.regimes if r.name in found]  # fmt: skip
    return [p for p in verdicts if p is not None]


def _lr_words(regime: Regime, preset: Preset) -> str:
    if regime.tune_lrs and preset.tune_seeds:
        return "each method at the learning rate its own sweep chose (below)"
    if regime.fixed:
        chosen = ", ".join(f"{m} {label(s)}" for m, s in regime.fixed.items() if m in regime.methods)  # fmt: skip
        return f"learning rates chosen elsewhere, not swept here ({chosen}; any other method lr {regime.lr:g})"  # fmt: skip
    return f"lr {regime.lr:g}"


def _vine_lines(out: Path, regime: Regime, runs: dict[str, list[RunSummary]]) -> list[str]:
    """Vine's continuations' share of its budget, its values' explained variance on its own
    batches, and the reference comparison (nothing without Vine runs)."""
    rs = [r for r in runs.get("vine", []) if r.vine]
    if not rs:
        return []
    share = statistics.fmean(r.value_tokens / max(r.tokens_generated, 1) for r in rs)
    evs = {w: [r.vine[f"explained_variance_{w}"] for r in rs] for w in ("first", "last")}
    evs = {w: [x for x in xs if x == x] for w, xs in evs.items()}
    words = ", ".join(f"{w} quarter {interval(xs) if xs else 'undefined'}" for w, xs in evs.items())  # fmt: skip
    return [
        f"Vine spent {share:.0%} of its generated tokens on value continuations (the rest on the "
        f"episodes it trained on). Its values' explained variance of the reward on its own "
        f"batches' states: {words} (mean over seeds, 95% interval).",
        "",
        *vine_error_table(out, regime),
    ]


def anchor_lines(runs: dict[str, list[RunSummary]]) -> list[str]:
    """The anchor-state table of the methods whose runs logged GiGPO's statistics, pooled over
    every step of every seed (nothing without such runs)."""
    logged = {m: [r.anchors for r in rs if r.anchors] for m, rs in runs.items()}
    logged = {m: xs for m, xs in logged.items() if xs}
    if not logged:
        return []
    lines = [
        "Anchor states (gigpo): the turns of a group's branches that start from the same exact "
        "env state form an anchor group, and each turn's step-level advantage is relative to "
        "its group's (a turn alone gets none). Over every step of every run: the fraction of "
        "turns in an anchor group of size >= 2, the mean anchor-group size (singletons "
        "included), the groups of size >= 2 that matching by the observation's text would form "
        "instead, and the fraction of those that mix exact states (pooled over them; -: none).",
        "",
        "| method | runs | steps | turns in anchor groups | mean anchor-group size | text-matched groups per step | text-matched groups mixing states | step-level advantage, mean size |",
        "|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for method, xs in logged.items():
        total = {key: sum(x[key] for x in xs) for key in xs[0]}
        steps = total["steps"]
        mixed = f"{total['text_mixed'] / total['text_groups']:.3f}" if total["text_groups"] else "-"  # fmt: skip
        lines.append(
            f"| {method} | {len(xs)} | {steps:.0f} | {total['anchor_fraction'] / steps:.3f} | "
            f"{total['anchor_size_mean'] / steps:.2f} | {total['text_groups'] / steps:.2f} | "
            f"{mixed} | {total['step_adv_abs_mean'] / steps:.3f} |"
        )
    return [*lines, ""]


def _trl_section(ours: list[RunSummary], theirs: list[RunSummary]) -> list[str]:
    a, b = interval([r.s_per_step for r in ours]), interval([r.s_per_step for r in theirs])
    fa, fb = interval([r.final for r in ours]), interval([r.final for r in theirs])
    ratio = a.mean / b.mean
    d = difference([r.final for r in ours], [r.final for r in theirs])
    accuracy = "equal or better" if d.mean >= 0 else "lower"
    target = "met" if ratio <= 0.5 and d.mean >= 0 else "NOT met"
    return [
        "Beside TRL (same model and tokenizer, tasks, reward, K, batch, lr and budget):",
        "",
        "| trainer | s/step | final held-out |",
        "|---|---|---|",
        f"| forkgym grpo | {a} | {fa} |",
        f"| TRL GRPOTrainer | {b} | {fb} |",
        "",
        f"forkgym's time per step is {ratio:.2f}x TRL's; its final accuracy is {accuracy} "
        f"({d.mean:+.3f}, 95% interval [{d[1]:+.3f}, {d[2]:+.3f}]). Target (at most 0.5x at equal "
        f"or better accuracy per generated token): {target}.",
        "",
        "Where forkgym's step goes (mean seconds per step over its seeds): "
        + ", ".join(
            f"{p} {statistics.fmean(r.phases.get(p, 0.0) for r in ours):.3f}"
            for p in _PHASES
            if any(p in r.phases for r in ours)
        )
        + ". TRL logs no breakdown; its step runs the same model over the same tokens "
        "(generation with transformers' `generate`, one forward and backward, AdamW).",
        "",
    ]


def check_report(out: str | Path, preset: Preset, methods: list[str] | None = None) -> list[str]:
    """What is wrong with a finished benchmark folder (nothing: ``[]``): every run complete,
    every forkgym run within one step of the budget, every method's learning-rate sweep
    recorded on a seed the report does not use, the report's sections and plots there,
    each plot a PNG that matplotlib reads back."""
    import matplotlib.image

    out = Path(out)
    problems = []
    report = out / "report.md"
    if not report.exists():
        return [f"{report} is missing"]
    text = report.read_text()
    found = _collect(out, preset)
    for regime in preset.regimes:
        if regime.name not in found:
            problems.append(f"{regime.name}: no warm start")
            continue
        if f"## {regime.name}" not in text:
            problems.append(f"{regime.name}: no section in report.md")
        if "overlap **0**" not in text:
            problems.append(f"{regime.name}: held-out problems overlap the train side (report.md)")
        _, runs = found[regime.name]
        for name in methods or regime.methods:
            method = resolve_method(name)
            if method.kind == "trl" or (method.needs_group and regime.k < 2):
                continue
            if swept(regime, preset, method):
                record = out / regime.name / "tune" / f"{name}.json"
                if not record.exists() or not json.loads(record.read_text())["scores"]:
                    problems.append(f"{regime.name}/{name}: no learning-rate sweep recorded")
            if set(preset.tune_seeds) & {r.seed for r in runs.get(name, [])}:
                problems.append(f"{regime.name}/{name}: a tuning seed is a reported seed")
            seeds = sorted(r.seed for r in runs.get(name, []))
            if seeds != sorted(preset.seeds):
                problems.append(f"{regime.name}/{name}: runs for seeds {seeds}, want {list(preset.seeds)}")  # fmt: skip
            for r in runs.get(name, []):
                if not r.within_budget:
                    problems.append(f"{regime.name}/{name} seed {r.seed}: generated {r.tokens_generated:,} for a budget of {r.budget:,} (last step {r.last_step_tokens:,})")  # fmt: skip
                if r.kind == "rl" and r.tokens_sampled + r.greedy_tokens + r.value_tokens != r.tokens_generated:  # fmt: skip
                    problems.append(f"{regime.name}/{name} seed {r.seed}: sampled {r.tokens_sampled:,} + greedy {r.greedy_tokens:,} + value continuations {r.value_tokens:,} != generated {r.tokens_generated:,}")  # fmt: skip
                if r.kind == "rl" and r.tokens_accepted > r.tokens_sampled:
                    problems.append(f"{regime.name}/{name} seed {r.seed}: more accepted than sampled tokens")  # fmt: skip
        for kind in ("accuracy-tokens", "accuracy-time", "strata", "length"):
            png = out / "plots" / f"{regime.name}-{kind}.png"
            if not png.exists() or f"plots/{png.name}" not in text:
                problems.append(f"{png} missing or not in report.md")
                continue
            try:
                image = matplotlib.image.imread(png)
            except Exception as exc:  # a broken file is the finding
                problems.append(f"{png} does not open as an image: {exc}")
                continue
            if image.ndim != 3 or image.shape[0] < 100:
                problems.append(f"{png}: unexpected image shape {image.shape}")
    for column in ("sampled / accepted", "trained on", "generated (mean)", "budget kept"):
        if column not in text:
            problems.append(f"report.md has no {column!r} column")
    return problems


def plan_lines(out: Path, preset: Preset, target: float) -> list[str]:
    """``forkgym bench --plan``: from the finished runs in ``out`` (a pilot), per regime and
    pair of methods with per-task outcomes on one task list, the pilot's variance split into
    its seeds' and tasks' parts and the seeds per method a minimum detectable difference of
    ``target`` needs over the regime's pairs (Holm's first step, power 0.8); then each
    regime's budget verdict and the budget to set (:mod:`.plateau`)."""
    found = _collect(out, preset)
    lines = [f"Seeds per method for a minimum detectable difference of {target:.3f} (80% power, Holm over each regime's pairs), from the pilot in {out}:", ""]  # fmt: skip
    for name, (_, runs) in found.items():
        recorded = {m: x for m, rs in runs.items() if len(rs) >= 2 and (x := _paired_outcomes(rs))}  # fmt: skip
        names = sorted(recorded)
        pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1 :] if recorded[a][0] == recorded[b][0]]  # fmt: skip
        if not pairs:
            lines += [f"{name}: no two methods with 2+ seeds of per-task outcomes on one task list", ""]  # fmt: skip
            continue
        lines += [f"{name} ({len(pairs)} pairs):", "", "| pair | seeds now | tasks | seed variance | task variance | seeds needed |", "|---|---|---|---|---|---|"]  # fmt: skip
        for a, b in pairs:
            (tasks, xa), (_, xb) = recorded[a], recorded[b]
            run_var, task_var = variance_parts(xa, xb)
            need = seeds_needed(run_var, task_var, len(tasks), target, len(pairs))
            shown = "more tasks needed" if math.isinf(need) else str(need)
            lines.append(f"| {a} − {b} | {min(len(xa), len(xb))} | {len(tasks)} | {run_var:.5f} | {task_var:.4f} | {shown} |")  # fmt: skip
        lines.append("")
    if budgets := budget_lines(_budgets(preset, found)):
        lines += [f"Budgets, from the pilot in {out}:", "", *budgets]
    return lines
