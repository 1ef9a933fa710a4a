"""Policy losses against unvectorised transcriptions of their papers' formulas (S13, S16-S18)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from forkgym.agents.learner.losses import LOSSES, get_loss, kl_estimate, kl_reward_penalty
from forkgym.agents.learner.reductions import REDUCTIONS, build_normaliser

MAX_NEW = 12
CONFIGS = {
    "vanilla_pg": {},
    "ppo_clip": {"eps_low": 0.2, "eps_high": 0.28},
    "ppo_dual": {"eps_low": 0.2, "eps_high": 0.28, "dual_clip": 1.6},
    "gspo": {"eps_low": 0.05, "eps_high": 0.08},
    "gspo_token": {"eps_low": 0.05, "eps_high": 0.08, "token_level": True},
    "sapo": {"tau_pos": 1.0, "tau_neg": 1.05},
    "sapo_hot": {"tau_pos": 3.0, "tau_neg": 8.0},
}
BASE = {
    "ppo_dual": "ppo_clip",
    "gspo_token": "gspo",
    "sapo_hot": "sapo",
}


def make_loss(key: str, **kw):
    return get_loss(BASE.get(key, key), max_episode_tokens=MAX_NEW, **CONFIGS[key], **kw)


def random_inputs(seed: int, b: int = 5, t: int = 7, spread: float = 0.3):
    g = torch.Generator().manual_seed(seed)
    logp = -torch.rand(b, t, generator=g, dtype=torch.float64) * 3
    old = logp + spread * torch.randn(b, t, generator=g, dtype=torch.float64)
    ref = logp + 0.2 * torch.randn(b, t, generator=g, dtype=torch.float64)
    adv = torch.randn(b, generator=g, dtype=torch.float64)
    lengths = torch.randint(0, t + 1, (b,), generator=g)
    lengths[0] = t
    mask = torch.arange(t)[None, :] < lengths[:, None]
    return logp, old, ref, adv, mask


# ---------------------------------------------------------------------------------------------
# Direct transcriptions: Python loops over sequences and tokens, autograd on scalars


def _clip(x, lo, hi):
    return torch.clamp(x, lo, hi)


def reference_terms(key, logp, old, adv, mask, ref=None, kl_coef=0.0, kl_kind="k3"):
    """Per valid sequence, its list of per-token loss terms (negated objective), 0-d tensors."""
    cfg = CONFIGS[key]
    name = BASE.get(key, key)
    out = []
    for i in range(logp.size(0)):
        toks = [t for t in range(logp.size(1)) if mask[i, t]]
        if not toks:
            continue
        a = adv[i]
        terms = []
        if name == "gspo":
            # GSPO eq. (7): s_i = (pi(y_i) / pi_old(y_i)) ** (1 / |y_i|), a product of token ratios
            prod = torch.ones((), dtype=logp.dtype)
            for t in toks:
                prod = prod * torch.exp(logp[i, t]) / torch.exp(old[i, t])
            s = prod ** (1.0 / len(toks))
            lo, hi = 1 - cfg["eps_low"], 1 + cfg["eps_high"]
            term = -min(s * a, _clip(s, lo, hi) * a)
            terms = [term for _ in toks]
        else:
            for t in toks:
                r = torch.exp(logp[i, t]) / torch.exp(old[i, t])
                if name == "vanilla_pg":  # REINFORCE: -A log pi
                    term = -a * logp[i, t]
                elif name == "ppo_clip":  # PPO eq. (7), DAPO eq. (10) clip-higher
                    lo, hi = 1 - cfg["eps_low"], 1 + cfg["eps_high"]
                    surr = min(r * a, _clip(r, lo, hi) * a)
                    if cfg.get("dual_clip") and a < 0:  # Ye et al. 2020 dual clip
                        surr = max(surr, cfg["dual_clip"] * a)
                    term = -surr
                else:  # SAPO: f(r) = sigma(tau (r - 1)) * 4 / tau, tau by the sign of A
                    tau = cfg["tau_pos"] if a > 0 else cfg["tau_neg"]
                    term = -(torch.sigmoid(tau * (r - 1)) * 4 / tau) * a
                terms.append(term)
        if kl_coef:
            for j, t in enumerate(toks):
                q = torch.exp(ref[i, t]) / torch.exp(logp[i, t])  # pi_ref / pi (Schulman 2020)
                k = {"k1": -torch.log(q), "k2": 0.5 * torch.log(q) ** 2, "k3": q - 1 - torch.log(q)}
                terms[j] = terms[j] + kl_coef * k[kl_kind]
        out.append(terms)
    return out


def reference_reduce(seqs, reduction):
    n = len(seqs)
    if n == 0:
        return torch.zeros((), dtype=torch.float64)
    if reduction == "seq_sum":
        return sum(sum(s) for s in seqs) / n
    if reduction == "seq_mean_token_mean":
        return sum(sum(s) / len(s) for s in seqs) / n
    if reduction == "token_mean":
        return sum(sum(s) for s in seqs) / sum(len(s) for s in seqs)
    return sum(sum(s) for s in seqs) / (MAX_NEW * n)


@pytest.mark.parametrize("key", sorted(CONFIGS))
@pytest.mark.parametrize("reduction", REDUCTIONS)
@settings(max_examples=4, deadline=None)
@given(
    st.integers(0, 2**31 - 1),
    st.sampled_from([(0.0, "k3"), (0.1, "k1"), (0.2, "k2"), (0.05, "k3")]),
)
def test_loss_matches_the_papers_formula(key, reduction, seed, kl):
    kl_coef, kl_kind = kl
    logp, old, ref, adv, mask = random_inputs(seed)
    x = logp.clone().requires_grad_()
    loss_fn = make_loss(key, reduction=reduction, kl_coef=kl_coef, kl_estimator=kl_kind)
    loss, _ = loss_fn(x, old, adv, mask, ref_logprobs=ref)
    (grad,) = torch.autograd.grad(loss, x)

    y = logp.clone().requires_grad_()
    expected = reference_reduce(
        reference_terms(key, y, old, adv, mask, ref, kl_coef, kl_kind), reduction
    )
    (expected_grad,) = torch.autograd.grad(expected, y)
    torch.testing.assert_close(loss, expected, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-9, atol=1e-12)


def test_transcription_exercises_every_clip_region():
    """The random inputs above really hit low/high/dual clipping and GSPO sequence clipping."""
    seen = {"clip_frac_low": 0.0, "clip_frac_high": 0.0, "clip_frac_dual": 0.0}
    seq = {"clip_frac_low_seq": 0.0, "clip_frac_high_seq": 0.0}
    for seed in range(10):
        logp, old, _, adv, mask = random_inputs(seed)
        _, m = make_loss("ppo_dual")(logp, old, adv, mask)
        _, g = make_loss("gspo")(logp, old, adv, mask)
        for k in seen:
            seen[k] += m[k]
        for k in seq:
            seq[k] += g[k]
    assert all(v > 0 for v in seen.values()), seen
    assert all(v > 0 for v in seq.values()), seq


# ---------------------------------------------------------------------------------------------
# gradcheck (float64) where the loss is smooth, or at points away from its kinks


@pytest.mark.parametrize("key", ["vanilla_pg", "sapo", "sapo_hot"])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_gradcheck_smooth_losses(key, reduction):
    logp, old, ref, adv, mask = random_inputs(11, b=3, t=4)
    loss_fn = make_loss(key, reduction=reduction, kl_coef=0.1)
    assert torch.autograd.gradcheck(
        lambda x: loss_fn(x, old, adv, mask, ref_logprobs=ref)[0], (logp.requires_grad_(),)
    )


@pytest.mark.parametrize("kind", ["k1", "k2", "k3"])
def test_gradcheck_kl_estimators(kind):
    logp, _, ref, _, mask = random_inputs(5, b=3, t=4)
    assert torch.autograd.gradcheck(
        lambda x: kl_estimate(x, ref, mask, kind).sum(), (logp.requires_grad_(),)
    )


def _kink_distance(key, logp, old, adv, mask) -> float:
    cfg = CONFIGS[key]
    lo, hi = 1 - cfg["eps_low"], 1 + cfg["eps_high"]
    if BASE.get(key, key) == "gspo":
        n = mask.sum(1).clamp(min=1)
        r = torch.exp(torch.where(mask, logp - old, 0.0).sum(1) / n)[mask.any(1)]
    else:
        r = torch.exp(logp - old)[mask]
    kinks = [lo, hi, cfg.get("dual_clip", math.inf)]
    return min((r - k).abs().min().item() for k in kinks)


@pytest.mark.parametrize("key", ["ppo_clip", "ppo_dual", "gspo", "gspo_token"])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_gradcheck_clipped_losses_away_from_kinks(key, reduction):
    loss_fn = make_loss(key, reduction=reduction)
    checked = 0
    for seed in range(40):
        logp, old, _, adv, mask = random_inputs(seed, b=3, t=4)
        if _kink_distance(key, logp, old, adv, mask) < 1e-3:
            continue
        assert torch.autograd.gradcheck(
            lambda x, old=old, adv=adv, mask=mask: loss_fn(x, old, adv, mask)[0],
            (logp.requires_grad_(),),
        )
        checked += 1
        if checked == 2:
            break
    assert checked == 2


# ---------------------------------------------------------------------------------------------
# Behaviour the papers specify


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_every_loss_is_the_policy_gradient_on_policy(reduction):
    """At pi = pi_old, PPO, GSPO and SAPO all reduce to REINFORCE's gradient (SAPO: f'(1) = 1)."""
    logp, _, _, adv, mask = random_inputs(2)
    grads = {}
    for key in CONFIGS:
        x = logp.clone().requires_grad_()
        loss, _ = make_loss(key, reduction=reduction)(x, logp, adv, mask)
        grads[key] = torch.autograd.grad(loss, x)[0]
    for key, g in grads.items():
        torch.testing.assert_close(g, grads["vanilla_pg"], msg=key)


def test_clip_higher_is_asymmetric():
    logp = torch.zeros(2, 1, requires_grad=True)
    old = torch.full((2, 1), -math.log(1.25))  # ratio 1.25 on both tokens
    adv = torch.tensor([1.0, -1.0])
    mask = torch.ones(2, 1, dtype=torch.bool)
    loss, m = get_loss("ppo_clip", eps_low=0.2, eps_high=0.2)(logp, old, adv, mask)
    (g,) = torch.autograd.grad(loss, logp)
    assert g[0, 0] == 0 and g[1, 0] != 0  # A > 0 above 1 + eps_high: clipped; A < 0: not
    assert m["clip_frac_high"] == 0.5 and m["clip_frac_low"] == 0.0
    loss, m = get_loss("ppo_clip", eps_low=0.2, eps_high=0.28)(logp, old, adv, mask)
    (g,) = torch.autograd.grad(loss, logp)
    assert g[0, 0] != 0 and m["clip_frac_high"] == 0.0


def test_dual_clip_bounds_negative_advantages():
    logp = torch.zeros(1, 1, requires_grad=True)
    old = torch.full((1, 1), -5.0)  # ratio e^5
    adv = torch.tensor([-2.0])
    mask = torch.ones(1, 1, dtype=torch.bool)
    plain, _ = get_loss("ppo_clip")(logp, old, adv, mask)
    dual, m = get_loss("ppo_clip", dual_clip=3.0)(logp, old, adv, mask)
    assert plain.item() == pytest.approx(2.0 * math.exp(5))
    assert dual.item() == pytest.approx(6.0)  # -(c * A)
    assert torch.autograd.grad(dual, logp)[0].item() == 0.0
    assert m["clip_frac_dual"] == 1.0


def test_gspo_clips_whole_sequences():
    """One far-off token pushes s_i out of the band: every token of that response loses its
    gradient, including tokens whose own ratio is 1 (what token-level PPO would keep)."""
    logp = torch.zeros(2, 4, requires_grad=True)
    old = torch.zeros(2, 4)
    old[0, 0] = -0.8  # response 0: s_0 = exp(0.2) > 1 + eps_high
    adv = torch.tensor([1.0, 1.0])
    mask = torch.ones(2, 4, dtype=torch.bool)
    loss, m = get_loss("gspo", eps_low=0.05, eps_high=0.05)(logp, old, adv, mask)
    (g,) = torch.autograd.grad(loss, logp)
    assert torch.count_nonzero(g[0]) == 0 and torch.count_nonzero(g[1]) == 4
    assert m["clip_frac_high_seq"] == 0.5
    ppo, _ = get_loss("ppo_clip", eps_low=0.05, eps_high=0.05)(logp, old, adv, mask)
    assert torch.count_nonzero(torch.autograd.grad(ppo, logp)[0][0]) == 3


def test_gspo_token_level_equals_sequence_level_for_response_advantages():
    logp, old, _, adv, mask = random_inputs(8)
    outs = []
    for key in ("gspo", "gspo_token"):
        x = logp.clone().requires_grad_()
        loss, _ = make_loss(key)(x, old, adv, mask)
        outs.append((loss, torch.autograd.grad(loss, x)[0]))
    torch.testing.assert_close(outs[0][0], outs[1][0])
    torch.testing.assert_close(outs[0][1], outs[1][1])


def test_sapo_gate_is_smooth_and_sign_dependent():
    """f'(r) = 4 s (1 - s): 1 at r = 1, decaying smoothly; faster for A < 0 when tau_neg > tau_pos."""
    r = torch.tensor([[1.0, 1.5, 2.0]])
    logp = r.log().requires_grad_()
    old = torch.zeros(1, 3)
    mask = torch.ones(1, 3, dtype=torch.bool)
    loss_fn = get_loss("sapo", tau_pos=1.0, tau_neg=4.0, reduction="seq_sum")
    weights = {}
    for sign in (1.0, -1.0):
        loss, _ = loss_fn(logp, old, torch.tensor([sign]), mask)
        (g,) = torch.autograd.grad(loss, logp)
        weights[sign] = (-g / sign / r)[0]  # d term / d log pi = -A f'(r) r
    assert weights[1.0][0].item() == pytest.approx(1.0)
    assert 1.0 > weights[1.0][1] > weights[1.0][2] > 0
    assert (weights[-1.0][1:] < weights[1.0][1:]).all()


def test_token_level_advantages_for_a_critic():
    logp, old, _, adv, mask = random_inputs(4)
    tok = adv[:, None].expand_as(logp).clone()
    tok[~mask] = float("nan")  # off-mask token advantages are ignored
    for key in ("vanilla_pg", "ppo_clip", "sapo"):
        a, _ = make_loss(key)(logp, old, adv, mask)
        b, _ = make_loss(key)(logp, old, tok, mask)
        torch.testing.assert_close(a, b)
    with pytest.raises(ValueError, match="per response"):
        make_loss("gspo")(logp, old, tok, mask)


# ---------------------------------------------------------------------------------------------
# KL, entropy, metrics, padding, validation


def test_kl_is_off_by_default_and_reported():
    logp, old, ref, adv, mask = random_inputs(6)
    plain, m0 = get_loss("ppo_clip")(logp, old, adv, mask)
    with_ref, m1 = get_loss("ppo_clip")(logp, old, adv, mask, ref_logprobs=ref)
    assert plain == with_ref and "kl" not in m0 and m1["kl"] > 0
    on, m2 = get_loss("ppo_clip", kl_coef=0.5)(logp, old, adv, mask, ref_logprobs=ref)
    norm = build_normaliser("token_mean", mask)
    extra = 0.5 * norm.reduce(kl_estimate(logp, ref, mask, "k3"), mask)
    torch.testing.assert_close(on, plain + extra)
    assert m2["policy_loss"] == pytest.approx(plain.item())


def test_kl_estimators_closed_forms_and_reward_penalty():
    logp = torch.tensor([[-1.0, -2.0, -0.5]])
    ref = torch.tensor([[-1.5, -1.0, -0.5]])
    mask = torch.tensor([[True, True, False]])
    d = torch.tensor([0.5, -1.0])
    torch.testing.assert_close(kl_estimate(logp, ref, mask, "k1")[0, :2], d)
    torch.testing.assert_close(kl_estimate(logp, ref, mask, "k2")[0, :2], 0.5 * d**2)
    torch.testing.assert_close(kl_estimate(logp, ref, mask, "k3")[0, :2], torch.exp(-d) - 1 + d)
    assert (kl_estimate(logp, ref, mask, "k3") >= 0).all()
    assert kl_estimate(logp, ref, mask, "k1")[0, 2] == 0
    pen = kl_reward_penalty(logp.requires_grad_(), ref, mask, coef=0.1, kind="k1")
    assert not pen.requires_grad and pen.item() == pytest.approx(0.1 * (0.5 - 1.0))
    with pytest.raises(ValueError, match="KL estimator"):
        kl_estimate(logp, ref, mask, "k4")


def test_metrics_are_floats_and_count_correctly():
    logp, old, _, adv, mask = random_inputs(1)
    entropy = torch.rand_like(logp)
    entropy[~mask] = float("nan")
    loss, m = make_loss("ppo_dual")(logp, old, adv, mask, entropy=entropy)
    assert all(isinstance(v, float) for v in m.values())
    assert m["tokens"] == mask.sum().item()
    assert m["sequences"] == mask.any(1).sum().item()
    assert m["loss"] == loss.item()
    assert m["entropy"] == pytest.approx(entropy[mask].mean().item())
    r = torch.exp(logp - old)[mask]
    a = adv[:, None].expand_as(logp)[mask]
    assert m["ratio_mean"] == pytest.approx(r.mean().item())
    assert (m["ratio_min"], m["ratio_max"]) == pytest.approx((r.min().item(), r.max().item()))
    n = r.numel()
    assert m["clip_frac_low"] == pytest.approx(((a < 0) & (r < 0.8)).sum().item() / n)
    assert m["clip_frac_high"] == pytest.approx(((a > 0) & (r > 1.28)).sum().item() / n)
    assert m["clip_frac_dual"] == pytest.approx(((a < 0) & (r > 1.6)).sum().item() / n)


@pytest.mark.parametrize("key", sorted(CONFIGS))
def test_padding_garbage_reaches_neither_loss_nor_gradient(key):
    logp, old, ref, adv, mask = random_inputs(9)
    clean = logp.clone().requires_grad_()
    a, _ = make_loss(key, kl_coef=0.1)(clean, old, adv, mask, ref_logprobs=ref)
    dirty_vals = logp.clone()
    dirty_old, dirty_ref = old.clone(), ref.clone()
    dirty_vals[~mask], dirty_old[~mask], dirty_ref[~mask] = float("nan"), float("inf"), -1e30
    dirty = dirty_vals.requires_grad_()
    b, m = make_loss(key, kl_coef=0.1)(dirty, dirty_old, adv, mask, ref_logprobs=dirty_ref)
    (ga,) = torch.autograd.grad(a, clean)
    (gb,) = torch.autograd.grad(b, dirty)
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(ga, gb)
    assert all(math.isfinite(v) for v in m.values())


def test_validation_errors():
    logp, old, _, adv, mask = random_inputs(0)
    loss_fn = get_loss("ppo_clip")
    with pytest.raises(ValueError, match="detached"):
        loss_fn(logp, old, adv.clone().requires_grad_(), mask)
    with pytest.raises(ValueError, match="response-level"):
        loss_fn(logp, old, adv[:-1], mask)
    with pytest.raises(ValueError, match="old_logprobs"):
        loss_fn(logp, old[:, :-1], adv, mask)
    with pytest.raises(ValueError, match="configured for reduction"):
        loss_fn(logp, old, adv, mask, normaliser=build_normaliser("seq_sum", mask))
    with pytest.raises(ValueError, match="unknown loss"):
        get_loss("trpo")
    with pytest.raises(ValueError, match="max_episode_tokens"):
        get_loss("gspo", reduction="dr_grpo_constant")
    with pytest.raises(ValueError, match="dual_clip"):
        get_loss("ppo_clip", dual_clip=0.5)
    assert {n: get_loss(n).reduction for n in LOSSES} == {
        "vanilla_pg": "seq_sum",
        "ppo_clip": "token_mean",
        "gspo": "seq_mean_token_mean",
        "sapo": "seq_mean_token_mean",
        "cispo": "token_mean",  # MiniMax-M1: normalised by all tokens of the batch
        "gmpo": "seq_mean_token_mean",  # (1/G) sum over responses
        "clip_cov": "token_mean",
        "kl_cov": "token_mean",
    }


def test_empty_micro_batch_is_a_zero_loss():
    logp = torch.zeros(2, 3, requires_grad=True)
    mask = torch.zeros(2, 3, dtype=torch.bool)
    for name in LOSSES:
        loss, m = get_loss(name)(logp, logp.detach(), torch.ones(2), mask)
        assert loss.item() == 0.0 and m["tokens"] == 0.0
        loss.backward()
