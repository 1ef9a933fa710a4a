"""Generation on several engines and asynchronously, through the real trainer: the staleness
bound holds and is logged per sample, runs repeat and resume exactly, and several engines
sample what one would."""

from __future__ import annotations

import pytest
import torch

from forkgym.agents.generation.backends.hf_policy import HFPolicy
from forkgym.agents.generation.backends.policy import GenerationRequest, SamplingParams
from forkgym.agents.generation.engine_pool import EnginePool, split_evenly
from forkgym.agents.generation.episode_log import read_episodes
from forkgym.agents.models import load_policy_model
from forkgym.agents.run.config import ConfigError, TrainConfig
from forkgym.agents.run.runlog import read_metrics
from forkgym.agents.run.trainer import Trainer
from tests.agents.run.test_trainer import comparable, config
from tests.conftest import WARM_ENV_KWARGS

OWN = {"backend_kwargs": {"share_model": False}}
WAITS = ("async/wait_s", "async/push_wait_s")


def without_waits(metrics: list[dict]) -> list[dict]:
    return [{k: v for k, v in m.items() if k not in WAITS} for m in comparable(metrics)]


def run_async(tmp_path, model_dir, name, **overrides):
    values = dict(env_kwargs=WARM_ENV_KWARGS, max_new_tokens=12, lr=1e-3, max_staleness=1, **OWN)
    values.update(overrides)
    trainer = Trainer(config(tmp_path, model_dir, name, **values))
    trainer.run()
    return trainer


def test_no_sample_older_than_max_staleness_is_trained_on_and_every_sample_is_tagged(
    tmp_path, warm_model_dir
):
    trainer = run_async(tmp_path, warm_model_dir, "a", steps=4, max_staleness=2)
    metrics = read_metrics(tmp_path / "a")[1:]
    episodes = read_episodes(tmp_path / "a")
    assert {r["step"] for r in episodes} == {1, 2, 3, 4}
    assert len(episodes) == 4 * 2 * 4  # steps x prompts x K
    # steps 1..3 trained on version-0 samples (generated before any update); step 4 on
    # samples from after step 1's update: two versions behind the learner's three
    by_step = {s: {(r["weight_version"], r["staleness"]) for r in episodes if r["step"] == s} for s in range(1, 5)}  # fmt: skip
    assert by_step == {1: {(0, 0)}, 2: {(0, 1)}, 3: {(0, 2)}, 4: {(1, 2)}}
    assert all(r["kept"] == (r["status"] not in ("timeout", "error")) for r in episodes)
    assert [m["async/staleness_max"] for m in metrics] == [0, 1, 2, 2]
    assert all(m["async/dropped_stale_groups"] == 0 for m in metrics)
    assert metrics[-1]["weight_version"] == 4 and metrics[-1]["tokens_trained"] > 0
    # stale samples are corrected like engine drift (truncated importance sampling)
    assert "correction/tis_clipped_frac" in metrics[-1]
    assert trainer.prefetch is None  # the run stopped its producer


def test_a_batch_too_stale_for_the_bound_never_reaches_the_loss(tmp_path, warm_model_dir):
    cfg = config(tmp_path, warm_model_dir, "stale", env_kwargs=WARM_ENV_KWARGS, max_staleness=1, **OWN)  # fmt: skip
    trainer = Trainer(cfg)
    old = trainer.collector.collect(0)  # generated with version 0
    trainer._ahead = {0: old}
    trainer.policy.sync_weights(trainer.model)
    trainer.policy.sync_weights(trainer.model)  # the learner is now two versions ahead
    try:
        metrics = trainer.train_step()
    finally:
        trainer.close()
    assert metrics["async/dropped_stale_groups"] == 2 and metrics["async/staleness_max"] == 2
    assert metrics["tokens_trained"] == 0
    assert not any(r["kept"] for r in read_episodes(tmp_path / "stale"))


def test_an_asynchronous_run_repeats_and_resumes_exactly(tmp_path, warm_model_dir):
    full = without_waits(read_metrics(run_async(tmp_path, warm_model_dir, "a", steps=4).run_dir))
    again = without_waits(read_metrics(run_async(tmp_path, warm_model_dir, "b", steps=4).run_dir))
    assert full == again
    # interrupted after step 2 (its checkpoint keeps the batch generated ahead with the
    # weights from before step 2's update), then resumed
    cfg = config(tmp_path, warm_model_dir, "c", env_kwargs=WARM_ENV_KWARGS, max_new_tokens=12,
                 lr=1e-3, max_staleness=1, steps=4, **OWN)  # fmt: skip
    Trainer(cfg).run(stop=lambda step, metrics: step == 2)
    resumed = Trainer(cfg, resume=True)
    assert resumed.step == 2 and sorted(resumed._ahead) == [2]
    resumed.run()
    assert without_waits(read_metrics(tmp_path / "c")) == full
    assert {r["step"] for r in read_episodes(tmp_path / "c")} == {1, 2, 3, 4}


def test_asynchronous_and_synchronous_runs_differ_only_by_the_samples_age(tmp_path, warm_model_dir):
    sync = Trainer(config(tmp_path, warm_model_dir, "s", env_kwargs=WARM_ENV_KWARGS, steps=2, **OWN))  # fmt: skip
    sync.run()
    a = read_metrics(tmp_path / "s")
    b = read_metrics(run_async(tmp_path, warm_model_dir, "a", steps=2, lr=1e-4, max_new_tokens=8).run_dir)  # fmt: skip
    assert not (tmp_path / "s" / "episodes.jsonl").exists()  # only on request in sync runs
    # step 1 trains on the same version-0 samples either way; step 2's differ
    assert a[1]["tokens_generated"] == b[1]["tokens_generated"]
    assert a[1]["reward_mean"] == b[1]["reward_mean"]
    assert b[2]["async/staleness_max"] == 1


def test_several_engines_sample_what_one_would(tiny_model_dir):
    model, tokenizer = load_policy_model(str(tiny_model_dir))
    one = HFPolicy(model, tokenizer, seed=3)
    copies = [load_policy_model(str(tiny_model_dir))[0] for _ in range(2)]
    pool = EnginePool([HFPolicy(m, tokenizer, seed=99) for m in copies], seed=3)
    prompts = [tokenizer("what is 1+2?")["input_ids"], tokenizer("2+2")["input_ids"]] * 3
    params = [SamplingParams(max_new_tokens=6, seed=5), SamplingParams(max_new_tokens=6),
              SamplingParams(max_new_tokens=6, greedy=True)] * 2  # fmt: skip
    requests = [GenerationRequest(tuple(p), q) for p, q in zip(prompts, params, strict=True)]
    try:
        pooled, alone = pool.generate(requests), one.generate(requests)
        # the same tokens, unseeded requests included; log-probs up to the float rounding of
        # another batch's padding
        assert [(g.token_ids, g.finish_reason) for g in pooled] == [(g.token_ids, g.finish_reason) for g in alone]  # fmt: skip
        for g, h in zip(pooled, alone, strict=True):
            assert g.logprobs == pytest.approx(h.logprobs, abs=1e-5)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.01)
        stats = pool.sync_weights(model)
        assert stats["engines"] == 2 and pool.weight_version == 1
        assert stats["bytes"] == 2 * sum(t.numel() * 4 for t in model.state_dict().values())
        for copy in copies:
            assert all(torch.equal(p, q) for p, q in zip(copy.parameters(), model.parameters(), strict=True))  # fmt: skip
    finally:
        pool.close()


def test_split_evenly():
    assert [list(r) for r in split_evenly(5, 2)] == [[0, 1, 2], [3, 4]]
    assert [len(r) for r in split_evenly(1, 3)] == [1, 0, 0]


def test_a_run_on_two_engines_trains_as_on_one(tmp_path, warm_model_dir):
    common = dict(env_kwargs=WARM_ENV_KWARGS, max_new_tokens=12, lr=1e-3, steps=2, **OWN)
    Trainer(config(tmp_path, warm_model_dir, "one", **common)).run()
    two = Trainer(config(tmp_path, warm_model_dir, "two", generation_engines=2, **common))
    assert isinstance(two.policy, EnginePool)
    two.run()
    drop = ("sync/", "drift/")
    a = [{k: v for k, v in m.items() if not k.startswith(drop)} for m in comparable(read_metrics(tmp_path / "one"))]  # fmt: skip
    b = [{k: v for k, v in m.items() if not k.startswith(drop)} for m in comparable(read_metrics(tmp_path / "two"))]  # fmt: skip
    # the same samples, rewards and counts; losses up to the float rounding of the engines'
    # batches (behaviour log-probs ~1e-7 apart)
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for key, value in x.items():
            if isinstance(value, float):
                assert y[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
            else:
                assert y[key] == value, key


@pytest.mark.parametrize("option", [{"generation_engines": 2}, {"max_staleness": 1}])
def test_engines_on_the_trainers_own_module_are_refused(option):
    with pytest.raises(ConfigError, match="share_model=false"):
        TrainConfig(**option)
    with pytest.raises(ConfigError, match="measure_drift"):
        TrainConfig(max_staleness=1, measure_drift=False, **OWN)


def test_a_pool_shuts_every_engine_down_and_refuses_engines_that_cannot_share_a_process(
    tiny_model_dir,
):
    model, tokenizer = load_policy_model(str(tiny_model_dir))
    closed = []

    def engine(i: int) -> HFPolicy:
        policy = HFPolicy(model, tokenizer, seed=i)
        policy.close = lambda: closed.append(i)  # HFPolicy holds nothing to shut down
        return policy

    EnginePool.build(engine, 3, seed=0).close()
    assert closed == [0, 1, 2]

    def lone(i: int) -> HFPolicy:
        policy = engine(10 + i)
        policy.concurrent = False  # as an in-process vLLM CPU engine says
        return policy

    with pytest.raises(ValueError, match="generation_engines=2 needs engines that generate"):
        EnginePool.build(lone, 2, seed=0)
    assert closed[3:] == [10]  # the one engine built was shut down, no second one started
