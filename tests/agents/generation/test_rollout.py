"""Group rollouts: identical starts, token-exact multi-turn streams, statuses kept."""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import pytest

import forkgym.envs  # noqa: F401
from forkgym.agents.generation.backends.hf_policy import HFPolicy
from forkgym.agents.generation.backends.policy import Generation, GenerationRequest, Policy
from forkgym.agents.generation.rollout import ChatTokens, Rollouts, TemplateError
from forkgym.agents.models import load_policy_model
from forkgym.agents.run.sft import demonstration
from forkgym.verifiers import MathVerifier
from tests.conftest import STEPS_KWARGS


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_policy_model(tiny_model_dir)


class ScriptedPolicy(Policy):
    """Answers each request with the canonical tokens of a scripted text (a test stand-in
    for a model that happens to write exactly these texts)."""

    def __init__(self, tokenizer, script) -> None:
        self.chat = ChatTokens(tokenizer)
        self.script = script  # (call index, request index) -> text
        self.calls = 0
        self.weight_version = 0
        self.seen: list[tuple[int, ...]] = []

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        out = []
        for i, request in enumerate(requests):
            self.seen.append(request.prompt_ids)
            ids = (*self.chat.encode(self.script(self.calls, i)), self.chat.stop[0])
            out.append(Generation(ids, tuple([-0.5] * len(ids)), "stop"))
        self.calls += 1
        return out

    def logprobs(self, sequences, starts, temperature=1.0):  # pragma: no cover - unused
        raise NotImplementedError

    def sync_weights(self, weights=None, version=None) -> None:  # pragma: no cover - unused
        self.weight_version += 1


def gold_actions(env_id: str, seed: int, **kwargs) -> list[str]:
    env = gym.make(env_id, **kwargs)
    env.reset(seed=seed)
    actions, done = [], False
    while not done:
        actions.append(env.unwrapped.gold_action())
        _, _, terminated, truncated, _ = env.step(actions[-1])
        done = terminated or truncated
    return actions


@pytest.mark.parametrize(
    ("env_id", "kwargs"),
    [("forkgym/Inventory-v0", {"flaky_rate": 0.3}), ("forkgym/Calculator-v0", {})],
)
def test_tool_episode_token_stream_and_mask_are_exact(loaded, env_id, kwargs):
    _, tokenizer = loaded
    seed = 21
    actions = gold_actions(env_id, seed, **kwargs)
    assert len(actions) >= 2  # multi-turn
    policy = ScriptedPolicy(tokenizer, lambda call, i: actions[call])
    rollouts = Rollouts(lambda: gym.make(env_id, **kwargs), policy, tokenizer, k=1)
    batch = rollouts.collect([seed])
    (episode,) = batch.groups[0].sampled
    assert episode.outcome.status.value == "correct" and episode.actions == actions
    # The whole conversation, rendered by the template at the end, tokenised in one go:
    env = gym.make(env_id, **kwargs)
    obs, _ = env.reset(seed=seed)
    for action in actions:
        obs, *_ = env.step(action)
    messages = [dict(m) for m in obs["messages"]]
    expected = list(tokenizer.apply_chat_template(messages, tokenize=True, return_dict=False))
    # The stream ends where generation ended, at <|im_end|>; the template's separator after
    # the last turn (a newline) was never generated.
    last_stop = max(i for i, t in enumerate(expected) if t == episode.token_ids[-1])
    assert tokenizer.decode(expected[last_stop + 1 :]).strip() == ""
    assert episode.token_ids == expected[: last_stop + 1]
    # The action mask covers exactly each assistant turn's content and its <|im_end|>:
    chat = ChatTokens(tokenizer)
    assistant_tokens = [t for a in actions for t in (*chat.encode(a), chat.stop[0])]
    assert [
        t for t, m in zip(episode.token_ids, episode.action_mask, strict=True) if m
    ] == assistant_tokens
    assert episode.logprobs == [(-0.5 if m else 0.0) for m in episode.action_mask]
    # every turn's prompt was the exact prefix of the final stream
    for prompt in policy.seen:
        assert episode.token_ids[: len(prompt)] == list(prompt)
    assert episode.statuses[-1] == "correct" and all(
        s.startswith("tool_") for s in episode.statuses[:-1]
    )


def test_demonstrations_are_the_same_stream(loaded):
    _, tokenizer = loaded
    env = gym.make("forkgym/Calculator-v0")
    demo = demonstration(env, ChatTokens(tokenizer), 5)
    obs, _ = env.reset(seed=5)
    for action in gold_actions("forkgym/Calculator-v0", 5):
        obs, *_ = env.step(action)
    assert demo.status == "correct"
    messages = [dict(m) for m in obs["messages"]]
    expected = list(tokenizer.apply_chat_template(messages, tokenize=True, return_dict=False))
    assert demo.token_ids == expected[: len(demo.token_ids)]
    assert tokenizer.decode(expected[len(demo.token_ids) :]) == "\n"


def test_groups_start_identically_and_seeds_make_runs_repeatable(loaded):
    model, tokenizer = loaded
    policy = HFPolicy(model, tokenizer, seed=0)

    def run():
        rollouts = Rollouts(
            lambda: gym.make("forkgym/Arithmetic-v0", system_prompt=None),
            policy,
            tokenizer,
            k=4,
            greedy=True,
            max_new_tokens=8,
            seed=3,
        )
        return rollouts.collect([11, 12], step=5)

    first, second = run(), run()
    for group in first.groups:
        starts = {tuple(ep.token_ids[: ep.prompt_len]) for ep in [*group.sampled, group.greedy]}
        assert len(starts) == 1 and group.greedy.kind == "greedy"
    assert [ep.token_ids for ep in first.episodes] == [ep.token_ids for ep in second.episodes]
    sampled = [tuple(ep.token_ids) for ep in first.groups[0].sampled]
    assert len(set(sampled)) > 1  # the branches' seeds differ
    assert first.cost.tokens_generated == sum(ep.generated_tokens for ep in first.episodes)
    assert first.cost.greedy_tokens == sum(g.greedy.generated_tokens for g in first.groups)
    # the batch's grids are the episodes' values, row-major
    assert first.lengths.tolist() == [[ep.generated_tokens for ep in g.sampled] for g in first.groups]  # fmt: skip
    assert first.greedy_lengths.tolist() == [g.greedy.generated_tokens for g in first.groups]
    assert first.valid.all() and first.greedy_valid.all()
    assert first.rewards.tolist() == [[ep.reward for ep in g.sampled] for g in first.groups]


def test_token_budget_truncates_and_statuses_are_kept(loaded):
    model, tokenizer = loaded
    policy = HFPolicy(model, tokenizer, seed=0)
    rollouts = Rollouts(
        lambda: gym.make("forkgym/Arithmetic-v0"), policy, tokenizer, k=3, max_new_tokens=1, seed=0
    )
    batch = rollouts.collect([1])
    for ep in batch.groups[0].sampled:
        if ep.action_mask[-1] and ep.token_ids[-1] not in rollouts.stop:
            assert (
                ep.truncated
                and ep.outcome.status.value == "truncated"
                and ep.statuses == ["truncated"]
                and ep.outcome.details["reason"] == "max_tokens"
            )
            assert ep.outcome.reward == 0.0 and ep.valid


def test_infrastructure_failures_are_invalid_not_wrong(loaded):
    _, tokenizer = loaded
    with MathVerifier(timeout=0.5, workers=1) as slow:
        policy = ScriptedPolicy(
            tokenizer, lambda call, i: r"\boxed{9^{9^{9^{9}}}}" if i % 2 else r"\boxed{0}"
        )
        rollouts = Rollouts(
            lambda: gym.make("forkgym/MathDataset-v0", path="math-sample", verifier=slow),
            policy,
            tokenizer,
            k=4,
        )
        episodes = rollouts.collect([0]).groups[0].sampled
    assert [ep.valid for ep in episodes] == [True, False, True, False]
    assert [ep.reward for ep in episodes][1::2] == [None, None]
    assert {ep.outcome.status.value for ep in episodes[1::2]} == {"timeout"}


def test_greedy_divergence_is_counted_for_multi_turn(loaded):
    _, tokenizer = loaded
    actions = gold_actions("forkgym/Calculator-v0", 2)
    # sampled branches answer at once (wrongly); the greedy branch calls the tool first
    script = lambda call, i: actions[call] if call > 0 or i == 3 else r"\boxed{1}"  # noqa: E731
    rollouts = Rollouts(
        lambda: gym.make("forkgym/Calculator-v0"),
        ScriptedPolicy(tokenizer, script),
        tokenizer,
        k=3,
        greedy=True,
    )
    group = rollouts.collect([2]).groups[0]
    assert group.greedy_diverged is True and group.greedy.outcome.status.value == "correct"
    assert group.barrier_idle_s > 0 and group.span_s > 0


def test_template_without_the_prefix_property_is_refused(loaded):
    _, tokenizer = loaded
    chat = ChatTokens(tokenizer)
    chat.render = lambda messages, generation_prompt: (
        "".join(m["content"] for m in messages) + ("" if generation_prompt else "!")
    )  # type: ignore[method-assign]
    with pytest.raises(TemplateError, match="extension of its prefix"):
        chat.continuation(
            [
                {"role": "user", "content": "ab"},
                {"role": "assistant", "content": "cd"},
                {"role": "tool", "content": "ef"},
            ],
            2,
        )


# -- continuing from inside an episode (Monte Carlo values from forks) -------------------------


@pytest.fixture(scope="module")
def steps_model(steps_model_dir):
    return load_policy_model(steps_model_dir)


def _steps_rollouts(model, tokenizer, **kwargs):
    make = lambda: gym.make("forkgym/CheckedSteps-v0", **STEPS_KWARGS)  # noqa: E731
    return Rollouts(make, HFPolicy(model, tokenizer, seed=0), tokenizer, max_new_tokens=48, **kwargs)  # fmt: skip


@pytest.mark.float_sensitive  # greedy decoding in other batches: CI runs it on other kernels too
def test_a_greedy_continuation_from_any_token_of_a_fork_replays_the_episode(steps_model):
    model, tokenizer = steps_model
    model.eval()
    rollouts = _steps_rollouts(model, tokenizer, k=0, greedy=True)
    seeds = list(range(4))
    episodes = [g.greedy for g in rollouts.collect(seeds, stream="eval").groups]
    assert max(len(ep.actions) for ep in episodes) >= 2  # premise: multi-turn episodes
    for seed, ep in zip(seeds, episodes, strict=True):
        positions = [i for i, a in enumerate(ep.action_mask) if a]  # turn starts and mid-turn
        starts = rollouts.starts_within(ep, seed, positions)
        assert starts[0].partial == 0 and max(s.partial for s in starts) > 0
        for done in rollouts.finish(starts, "vine", greedy=True):
            assert done.token_ids == ep.token_ids  # the remainder, token for token
            assert done.outcome == ep.outcome
            assert done.actions[-1] == ep.actions[-1] and done.statuses[-1] == ep.statuses[-1]


@pytest.mark.float_sensitive
def test_forked_continuations_are_independent_and_keyed(steps_model):
    model, tokenizer = steps_model
    rollouts = _steps_rollouts(model, tokenizer, k=1)
    (group,) = rollouts.collect([7]).groups
    ep = group.sampled[0]
    first = ep.prompt_len  # the state before the first action token
    starts = rollouts.starts_within(ep, 7, [first], copies=6)
    assert {s.branch for s in starts} == set(range(6))
    assert len({id(s.env) for s in starts}) == 6  # a fork each
    a = rollouts.finish(starts, "vine", step=0)
    b = rollouts.finish(rollouts.starts_within(ep, 7, [first], copies=6), "vine", step=0)
    assert [e.token_ids for e in a] == [e.token_ids for e in b]  # same keys, same draws
    assert len({tuple(e.token_ids) for e in a}) > 1  # different branches, different draws
    with pytest.raises(ValueError, match="action token"):
        rollouts.starts_within(ep, 7, [0])  # a prompt token is no action
