import pytest

from forkgym.agents.run.config import ConfigError, TrainConfig


def test_defaults_validate_and_round_trip(tmp_path):
    config = TrainConfig()
    path = tmp_path / "config.yaml"
    config.save(path)
    assert TrainConfig.load(path) == config


def test_file_then_values_then_overrides(tmp_path):
    (tmp_path / "c.toml").write_text('estimator = "grpo"\nsteps = 7\n[env_kwargs]\ndigits = 2\n')
    config = TrainConfig.load(
        tmp_path / "c.toml",
        ["steps=9", "env_kwargs.terms=3", "temperature=0.7", "betas=[0.8, 0.9]", "lr=3e-4"],
        seed=5,
    )
    assert (config.estimator, config.steps, config.seed, config.temperature) == ("grpo", 9, 5, 0.7)
    assert config.lr == 3e-4
    assert config.env_kwargs == {"digits": 2, "terms": 3} and config.betas == (0.8, 0.9)
    (tmp_path / "c.yaml").write_text("estimator: remax\nk: 1\n")
    assert TrainConfig.load(tmp_path / "c.yaml").estimator == "remax"  # K = 1 is fine for ReMax


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["stepz=3"], "unknown config key"),
        (["estimator=nope"], "estimator='nope'"),
        (["estimator=rloo", "k=1"], "needs k >= 2"),
        (["temperature=0"], "temperature=0"),
        (["loss=mse"], "loss='mse'"),
        (["steps"], "not key=value"),
        (["steps=0", "lr=-1"], "steps=0 must be >= 1; lr=-1"),
    ],
)
def test_errors_name_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message):
        TrainConfig.load(None, overrides)


def test_bad_files(tmp_path):
    (tmp_path / "c.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"yaml, \.yml or \.toml"):
        TrainConfig.load(tmp_path / "c.json")
    (tmp_path / "c.yaml").write_text("- a list\n")
    with pytest.raises(ConfigError, match="mapping"):
        TrainConfig.load(tmp_path / "c.yaml")


def test_a_plugin_file_registers_an_estimator_the_config_can_name(tmp_path):
    from forkgym.agents.advantages.estimators import ESTIMATORS

    plugin = tmp_path / "my_estimators.py"
    plugin.write_text(
        "from forkgym.agents.advantages.estimators import ESTIMATORS, Estimator\n"
        "@ESTIMATORS.register('test_plugin_reinforce')\n"
        "class Plain(Estimator):\n"
        "    def compute(self, g):\n"
        "        return g.r, {}\n"
    )
    try:
        with pytest.raises(ConfigError, match="test_plugin_reinforce"):
            TrainConfig(estimator="test_plugin_reinforce")
        config = TrainConfig(plugins=[str(plugin)], estimator="test_plugin_reinforce")
        assert TrainConfig.from_dict(config.to_dict()) == config  # loading it again is a no-op
    finally:
        ESTIMATORS.pop("test_plugin_reinforce", None)
    with pytest.raises(ConfigError, match=r"no_such_module.*failed to load"):
        TrainConfig(plugins=["no_such_module"])
    with pytest.raises(ConfigError, match="no such file"):
        TrainConfig(plugins=[str(tmp_path / "missing.py")])


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"max_resample_rounds": -1, "dynamic_sampling": True}, "max_resample_rounds=-1"),
        (
            {"dynamic_sampling": True, "k": 1, "estimator": "remax"},
            "dynamic_sampling=True needs k >= 2",
        ),
        ({"grad_clip": -1.0}, "grad_clip=-1.0 must be > 0"),
        ({"weight_decay": -0.1}, "weight_decay"),
        ({"eval_episodes": 0}, "eval_episodes=0"),
        ({"eval_k": -1}, "eval_k=-1"),
        (
            {"loss_kwargs": {"reduction": "seq_sum"}},
            r"loss_kwargs \['reduction'\]: set them as config keys",
        ),
        ({"backend_kwargs": {"share_modle": False}}, "backend_kwargs"),
        ({"algorithm": "ppo", "algorithm_kwargs": {"gamma": 5}}, "gamma and lam must be in"),
        (
            {"algorithm": "ppo", "k": 1, "algorithm_kwargs": {"group_centering": "loo"}},
            "needs k >= 2",
        ),
    ],
)
def test_values_that_would_fail_later_are_refused_now(values, message):
    with pytest.raises(ConfigError, match=message):
        TrainConfig(**values)


def test_the_estimator_is_checked_only_where_it_is_used():
    TrainConfig(algorithm="ppo", k=1)  # rloo would need k >= 2, but ppo uses no estimator
    with pytest.raises(ConfigError, match="needs k >= 2"):
        TrainConfig(algorithm="critic_free", k=1)


def test_plugin_files_of_one_name_in_two_folders_both_load(tmp_path):
    from forkgym.agents.advantages.estimators import ESTIMATORS

    paths = []
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        path = tmp_path / folder / "plugin.py"
        path.write_text(
            "from forkgym.agents.advantages.estimators import ESTIMATORS, Estimator\n"
            f"ESTIMATORS.register('test_plugin_{folder}', type('E', (Estimator,), {{}}))\n"
        )
        paths.append(str(path))
    try:
        TrainConfig(plugins=paths, estimator="test_plugin_b")
        assert {"test_plugin_a", "test_plugin_b"} <= set(ESTIMATORS)
    finally:
        ESTIMATORS.pop("test_plugin_a", None)
        ESTIMATORS.pop("test_plugin_b", None)


def test_sharding_refuses_what_it_does_not_shard_and_needs_an_engine_of_its_own():
    own = {"backend_kwargs": {"share_model": False}}
    assert TrainConfig(data_parallel="shard", **own).data_parallel == "shard"
    with pytest.raises(ConfigError, match="must be replicate"):
        TrainConfig(data_parallel="zero3", **own)
    with pytest.raises(ConfigError, match="critic"):
        TrainConfig(data_parallel="shard", algorithm="ppo", **own)
    with pytest.raises(ConfigError, match="KL reference"):
        TrainConfig(data_parallel="shard", kl_coef=0.1, **own)
    with pytest.raises(ConfigError, match="share_model=false"):
        TrainConfig(data_parallel="shard")


def test_the_rules_about_ranks_are_the_configs():
    TrainConfig(estimator="reinforce_ema", dynamic_sampling=True, prompts_per_step=1).check_ranks(1)
    with pytest.raises(ConfigError) as refused:
        TrainConfig(estimator="grpo_batch_std", dynamic_sampling=True, prompts_per_step=1).check_ranks(2)  # fmt: skip
    message = str(refused.value)
    assert "whole batch" in message and "dynamic_sampling" in message and "prompts_per_step" in message  # fmt: skip
    TrainConfig(estimator="rloo", prompts_per_step=2).check_ranks(2)


def test_what_the_engines_hold_is_declared_by_the_backend():
    assert not TrainConfig().engines_have_own_weights and not TrainConfig().measures_drift
    own = TrainConfig(backend_kwargs={"share_model": False})
    assert own.engines_have_own_weights and own.measures_drift and own.drift_corrections == []
    stale = TrainConfig(backend_kwargs={"share_model": False}, max_staleness=1)
    assert stale.drift_corrections == ["tis"]
    assert TrainConfig(rollout_correction=["tis"]).measures_drift  # asked for on a shared model
    with pytest.raises(ConfigError, match="algorithm 'ppo' trains a model of its own"):
        TrainConfig(algorithm="ppo", data_parallel="shard", backend_kwargs={"share_model": False})
