import pytest

from forkgym.registry import Registry


def test_register_lookup_build_and_errors():
    things = Registry("widget", name_attribute="name")

    @things.register("square")
    class Square:
        def __init__(self, side: int = 1) -> None:
            self.side = side

    things.register("double", lambda x=2: 2 * x)
    assert "square" in things and sorted(things) == ["double", "square"]
    assert Square.name == "square"  # classes learn their registered name
    assert things.build("square", side=3).side == 3 and things.build("double", x=5) == 10
    with pytest.raises(ValueError, match="widget 'square' is already registered"):
        things.register("square", Square)
    with pytest.raises(ValueError, match=r"unknown widget 'circle'; registered: \['double', 'square'\]"):  # fmt: skip
        things.lookup("circle")
    del things["double"]  # a plain dict otherwise: tests clean up their entries
    assert list(things) == ["square"]


def test_every_family_uses_it():
    from forkgym.agents.advantages.algorithms import ALGORITHMS
    from forkgym.agents.advantages.estimators import ESTIMATORS
    from forkgym.agents.generation.backends.registry import BACKENDS
    from forkgym.agents.learner.losses import LOSSES
    from forkgym.agents.learner.schedules import LR_SCHEDULES
    from forkgym.envs.tool_parsers import TOOL_PARSERS
    from forkgym.verifiers.extract import EXTRACTORS

    for registry in (ALGORITHMS, BACKENDS, ESTIMATORS, LOSSES, LR_SCHEDULES, TOOL_PARSERS, EXTRACTORS):  # fmt: skip
        assert isinstance(registry, Registry) and len(registry) >= 1
    assert {"critic_free", "ppo"} <= set(ALGORITHMS) and "transformers" in BACKENDS
