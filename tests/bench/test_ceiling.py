"""The critic ceiling by Monte Carlo: its figures, their invariants, and the report's table."""

import json
import math

import pytest

from forkgym.agents.generation.backends.hf_policy import HFPolicy
from forkgym.agents.models import load_policy_model
from forkgym.bench import PRESETS
from forkgym.bench.ceiling import FIGURES, ceiling_batch, ceiling_table, pooled_figures
from tests.conftest import WARM_ENV_KWARGS

pytestmark = pytest.mark.float_sensitive  # sampled rollouts: CI runs it again on other kernels


@pytest.fixture(scope="module")
def result(warm_model_dir):
    model, tokenizer = load_policy_model(warm_model_dir)
    model.eval()
    policy = HFPolicy(model, tokenizer, seed=0)
    env = "forkgym/Arithmetic-v0"
    # 24 responses at ~20% accuracy: all equal (undefined figures) with probability < 1%
    shape = dict(max_new_tokens=12, prompts=6, k=4, m=4, seed=5, batch=0, bootstrap=200)
    return ceiling_batch(policy, tokenizer, env, WARM_ENV_KWARGS, **shape)


def test_every_figure_is_there_with_an_interval(result):
    assert set(result["figures"]) == {key for key, *_ in FIGURES}
    assert result["responses"] == 24 and result["action_tokens"] >= 9
    # every prefix of every response is continued m = 4 times
    assert result["continuations"] == 4 * result["action_tokens"] == 4 * result["scored_tokens"]
    for f in result["figures"].values():
        if f["point"] is not None:
            assert f["point"] <= 1.0 and f["low"] <= f["high"]


def test_a_critic_is_read_on_the_same_scored_tokens(warm_model_dir, result):
    """A critic that says the same number everywhere explains nothing (at most 0, exactly 0
    only at the pooled mean reward), and its share is its figure over the exact value's."""
    model, tokenizer = load_policy_model(warm_model_dir)
    model.eval()
    seen = []

    def constant(token_ids):
        seen.append(len(token_ids))
        return [0.5] * len(token_ids)

    shape = dict(max_new_tokens=12, prompts=6, k=4, m=4, seed=5, batch=0, bootstrap=200)
    policy = HFPolicy(model, tokenizer, seed=0)
    out = ceiling_batch(policy, tokenizer, "forkgym/Arithmetic-v0", WARM_ENV_KWARGS, critic=constant, **shape)  # fmt: skip
    assert len(seen) == out["responses"]  # once per episode, its whole token list
    assert out["figures"]["exact_value"] == result["figures"]["exact_value"]  # same batch
    critic, exact = out["figures"]["critic"], out["figures"]["exact_value"]
    if exact["point"] is None:
        pytest.skip("every sampled reward was equal: explained variance is undefined")
    assert critic["point"] <= 1e-12 and critic["high"] <= 1e-12
    share = out["figures"]["critic_share"]["point"]
    if exact["point"] > 0:
        assert share == pytest.approx(critic["point"] / exact["point"])


def test_one_batch_pooled_is_that_batchs_own_figure(result):
    pooled = pooled_figures([result], bootstrap=50)
    own = result["figures"]["exact_value"]["point"]
    if own is None:
        assert pooled["exact_value"]["point"] is None
    else:
        assert pooled["exact_value"]["point"] == pytest.approx(own, abs=1e-9)
    assert sum(x["n"] for x in result["prompt_sums"]) == result["scored_tokens"]


def _batch(prompts):
    """A ceiling result's per-prompt sums from (reward, exact value, noise, critic) tokens."""
    sums = [{"n": len(p), "r": sum(r for r, *_ in p), "r2": sum(r * r for r, *_ in p),
             "v": sum((r - v) ** 2 for r, v, _, _ in p), "noise": sum(q for _, _, q, _ in p),
             "c": sum((r - c) ** 2 for r, _, _, c in p)} for p in prompts]  # fmt: skip
    return {"prompt_sums": sums}


def test_pooling_takes_one_variance_over_every_batchs_tokens():
    """Pooled figures are those of the concatenated tokens, so a batch with one success in
    many, whose own share is a ratio of two near-zeros, weighs only what it holds."""
    a = [[(1.0, 0.8, 0.01, 0.6), (0.0, 0.3, 0.02, 0.4)], [(1.0, 0.9, 0.0, 0.5), (0.0, 0.1, 0.01, 0.3)]]  # fmt: skip
    b = [[(0.0, 0.05, 0.0, 0.6)] * 9 + [(1.0, 0.2, 0.01, 0.2)]]
    tokens = [t for p in a + b for t in p]
    n = len(tokens)
    mean = sum(r for r, *_ in tokens) / n
    var = sum((r - mean) ** 2 for r, *_ in tokens) / n
    exact = 1 - (sum((r - v) ** 2 - q for r, v, q, _ in tokens) / n) / var
    critic = 1 - (sum((r - c) ** 2 for r, _, _, c in tokens) / n) / var
    out = pooled_figures([_batch(a), _batch(b)], bootstrap=200)
    assert out["exact_value"]["point"] == pytest.approx(exact)
    assert out["critic"]["point"] == pytest.approx(critic)
    assert out["critic_share"]["point"] == pytest.approx(critic / exact)
    for f in out.values():
        assert f["low"] <= f["high"]
    same = [[(1.0, 0.5, 0.0, 0.5)] * 3]  # every reward equal: undefined, not a number
    assert pooled_figures([_batch(same)], bootstrap=10)["critic"]["point"] is None


def test_taking_the_estimates_noise_out_can_only_raise_the_exact_values_figure(result):
    exact, raw = result["figures"]["exact_value"], result["figures"]["exact_value_uncorrected"]
    if exact["point"] is None:
        pytest.skip("every sampled reward was equal: explained variance is undefined")
    assert exact["point"] >= raw["point"] - 1e-12


def test_the_report_sets_the_critics_beside_both_references(tmp_path, result):
    regime = PRESETS["smoke"].regimes[0]
    (tmp_path / regime.name).mkdir()
    record = {"m": 4, "prompts": 6, "k": 4, "policies": {"warm start": {"batches": [result]}}}
    (tmp_path / regime.name / "ceiling.json").write_text(json.dumps(record))
    critics = {"ppo": [{"explained_variance_first": 0.01, "explained_variance_last": 0.03},
                       {"explained_variance_first": -0.01, "explained_variance_last": math.nan}]}  # fmt: skip
    text = "\n".join(ceiling_table(tmp_path, regime, critics))
    assert "the exact value P(correct \\| prefix)" in text  # the pipe escaped in the table
    assert "each prompt's exact success rate" in text and "RLOO's baseline" in text
    assert "ppo's critic on fresh batches: first quarter 0.000 ± " in text
    assert "last quarter 0.030" in text  # the undefined seed enters no mean
    assert ceiling_table(tmp_path / "elsewhere", regime, critics) == []


def test_a_multi_turn_ceiling_continues_every_scored_prefix_to_the_end(steps_model_dir):
    """CheckedSteps: each scored prefix (every 8th action token of a turn, the turn's first
    included) is continued m times from a fork; with rewards that do not vary (this barely
    trained model rarely finishes a chain) every figure is undefined, not a number."""
    from tests.conftest import STEPS_KWARGS

    model, tokenizer = load_policy_model(steps_model_dir)
    model.eval()
    policy = HFPolicy(model, tokenizer, seed=0)
    shape = dict(max_new_tokens=48, prompts=4, k=4, m=4, seed=3, batch=0, bootstrap=200, stride=8)
    out = ceiling_batch(policy, tokenizer, "forkgym/CheckedSteps-v0", STEPS_KWARGS, **shape)
    scored = out["scored_tokens"]
    assert out["continuations"] == 4 * scored
    assert out["responses"] == 16 and 0 < scored < out["action_tokens"]  # a stride-8 subsample
    exact = out["figures"]["exact_value"]
    if out["accuracy"] in (0.0, 1.0):
        assert all(f["point"] is None for f in out["figures"].values())
    elif exact["point"] is not None:
        assert exact["point"] >= out["figures"]["exact_value_uncorrected"]["point"] - 1e-12
