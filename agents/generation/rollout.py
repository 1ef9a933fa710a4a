"""Group rollouts: K sampled branches (and a greedy one for ReMax) per task, token-exact.

Every branch of a group starts from ``env.reset(seed=task_seed)`` of the same task, so the
branches differ only by what the policy samples. All live branches of all groups are
continued in ONE batched ``policy.generate`` call per turn. Multi-turn episodes are kept as
token ids from start to end:

* the first prompt is the tokenizer's chat template applied to the env's first observation;
* generated ids are appended exactly as sampled (never decoded and re-encoded), with action
  mask 1 and their behaviour log-probs;
* what the env adds (tool results, feedback) is appended as the chat template renders it,
  tokenised on its own, with action mask 0: the template's rendering of the conversation so
  far must be a string prefix of its rendering of the longer one (checked, not assumed).

A turn that hits ``max_new_tokens`` without a stop token ends the episode as ``truncated``
(``env.truncate("max_tokens")``). Per episode the tokens, mask, behaviour log-probs, statuses
per turn, final outcome and wall time are kept; per group, how long its branches idled
waiting for the slowest one (the group barrier, docs/design.md S9); for multi-turn envs,
whether the greedy branch left every sampled branch's path (S4).

:meth:`Rollouts.starts_within` and :meth:`Rollouts.finish` continue an episode from any of its
action tokens: the env replayed to the start of that token's turn and forked (tool results and
random state come back exactly), the turn's tokens so far kept, the rest generated and played
to the end. A greedy continuation reproduces a greedy episode token for token (tested); sampled
ones are the Monte Carlo estimates of a state's value (``bench/ceiling.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from forkgym.envs.base import observation_key

from ..batch import RolloutBatch, RolloutCost
from ..episode import Episode, Group
from ..seeds import sampling_seed
from .backends.policy import GenerationRequest, Policy, SamplingParams

__all__ = [
    "ChatTokens",
    "Rollouts",
    "Start",
    "TemplateError",
    "stop_token_ids",
]


@dataclass
class Start:
    """A state inside an episode to continue from (:meth:`Rollouts.finish`): ``env`` at the
    start of the current turn (its own copy: a fork), the episode's token ids so far, the
    conversation before the current turn, and how many of the last ids are tokens this turn
    has generated already (0: the turn has not begun). ``key`` and ``branch`` key the
    continuation's sampling seeds."""

    env: Any
    token_ids: list[int]
    messages: list[dict[str, str]]
    partial: int = 0
    key: int = 0
    branch: int = 0


class TemplateError(RuntimeError):
    """The chat template does not render a conversation as an extension of its prefix."""


def stop_token_ids(tokenizer: Any) -> tuple[int, ...]:
    """End-of-turn ids: ``<|im_end|>`` when the vocabulary has it, and the EOS token."""
    ids = []
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    if isinstance(im_end, int) and im_end != tokenizer.unk_token_id and im_end is not None:
        ids.append(im_end)
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    if not ids:
        raise ValueError("the tokenizer has neither <|im_end|> nor an EOS token to stop a turn")
    return tuple(ids)


class ChatTokens:
    """Token ids of a conversation as the tokenizer's chat template renders it, built turn by turn.

    ``prompt(messages)`` is the first observation with the generation prompt.
    ``continuation(messages, upto)`` is what follows the assistant turn ``messages[upto - 1]``
    once the env has answered: the template's text after that turn's end-of-turn marker (the
    separator, the new messages, the next generation prompt), tokenised on its own. It needs
    the template to render a conversation as an extension of its prefix, which is checked.
    """

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.stop = stop_token_ids(tokenizer)
        self._markers = [tokenizer.decode([stop]) for stop in self.stop]
        self._cache: dict[str, list[int]] = {}

    def render(self, messages: Sequence[dict[str, str]], generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            [dict(m) for m in messages], tokenize=False, add_generation_prompt=generation_prompt
        )

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def prompt(self, messages: Sequence[dict[str, str]]) -> list[int]:
        """Ids of the first observation (cached: every branch of a group shares it)."""
        key = repr([(m["role"], m["content"]) for m in messages])
        if key not in self._cache:
            if len(self._cache) > 4096:
                self._cache.clear()
            self._cache[key] = self.encode(self.render(messages, generation_prompt=True))
        return list(self._cache[key])

    def continuation(self, messages: Sequence[dict[str, str]], upto: int) -> list[int]:
        prefix = self.render(messages[:upto], generation_prompt=False)
        full = self.render(messages, generation_prompt=True)
        if not full.startswith(prefix):
            raise TemplateError(
                "the chat template does not render a conversation as an extension of its "
                f"prefix (after ...{prefix[-60:]!r} it renders ...{full[max(0, len(prefix) - 60) : len(prefix)]!r})"
            )
        end = -1
        for marker in self._markers:  # where the turn's end-of-turn marker ends in the text
            at = prefix.rfind(marker)
            if at >= 0 and at + len(marker) > end:
                end = at + len(marker)
        if end < 0:
            raise TemplateError(
                "the chat template does not end an assistant turn with a stop token"
            )
        return self.encode(full[end:])


class Rollouts:
    """Runs groups of episodes for a policy on a pool of reusable environments.

    ``make_env`` builds one environment; a pool of them is kept and reset for each task, so
    no environment is constructed per step.
    """

    def __init__(
        self,
        make_env: Callable[[], Any],
        policy: Policy,
        tokenizer: Any,
        *,
        k: int,
        greedy: bool = False,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_new_tokens: int = 24,
        seed: int = 0,
        record_states: bool = False,
    ) -> None:
        """``record_states``: keep each sampled turn's start, exact state key and observation
        text key on its episode (``Episode.turn_starts``, ``state_keys``, ``text_keys``)."""
        self.make_env = make_env
        self.record_states = record_states
        self.policy = policy
        self.tokenizer = tokenizer
        self.k, self.greedy = k, greedy
        self.temperature, self.top_p, self.max_new_tokens = temperature, top_p, max_new_tokens
        self.seed = seed
        self.chat = ChatTokens(tokenizer)
        self.stop = self.chat.stop
        self._envs: list[Any] = []

    @property
    def max_turns(self) -> int:
        """The environment's turn budget (1 for single-answer envs)."""
        return int(getattr(self._env(0).unwrapped, "max_turns", 1))

    def _env(self, i: int) -> Any:
        while len(self._envs) <= i:
            self._envs.append(self.make_env())
        return self._envs[i]

    def collect(
        self,
        task_seeds: Sequence[int],
        stream: str = "train",
        step: int = 0,
        keys: Sequence[int] | None = None,
    ) -> RolloutBatch:
        """Run every group to the end; ``(stream, step)`` and each group's key (default: its
        position) key the sampling seeds. A slice of a longer task list (an evaluation in
        chunks, a data-parallel rank's share) passes the tasks' places in the whole list, and
        draws what the whole list would."""
        keys = list(range(len(task_seeds))) if keys is None else list(keys)
        if len(keys) != len(task_seeds):
            raise ValueError("keys must have one entry per task seed")
        start = time.perf_counter()
        cost = RolloutCost()
        groups: list[Group] = []
        live: list[tuple[Episode, Any, list[dict[str, str]]]] = []  # episode, env, messages
        env_index = 0
        for g, task_seed in enumerate(task_seeds):
            branches = [("sampled", b) for b in range(self.k)] + (
                [("greedy", self.k)] if self.greedy else []
            )
            group = Group(task_id="", task_seed=task_seed, sampled=[])
            for kind, b in branches:
                env = self._env(env_index)
                env_index += 1
                t0 = time.perf_counter()
                obs, info = env.reset(seed=task_seed)
                cost.env_s += time.perf_counter() - t0
                ids = self.chat.prompt(obs["messages"])
                episode = Episode(
                    group=g, branch=b, kind=kind, task_id=info["task_id"], token_ids=list(ids),
                    action_mask=[0] * len(ids), logprobs=[0.0] * len(ids), prompt_len=len(ids),
                    weight_version=self.policy.weight_version,
                )  # fmt: skip
                group.task_id = info["task_id"]
                if kind == "greedy":
                    group.greedy = episode
                else:
                    group.sampled.append(episode)
                live.append((episode, env, list(obs["messages"])))
            groups.append(group)

        done_at: dict[int, float] = {}
        turn = 0
        while live:
            if self.record_states:
                for episode, env, messages in live:
                    episode.turn_starts.append(len(episode.token_ids))
                    episode.state_keys.append(env.unwrapped.state_key())
                    episode.text_keys.append(observation_key(messages))
            requests = [
                GenerationRequest(
                    tuple(ep.token_ids), self._params(ep, stream, step, turn, keys[ep.group])
                )
                for ep, *_ in live
            ]
            t0 = time.perf_counter()
            generations = self.policy.generate(requests)
            cost.generate_s += time.perf_counter() - t0
            cost.turns += 1
            still: list[tuple[Episode, Any, list[dict[str, str]]]] = []
            t0 = time.perf_counter()
            for (episode, env, messages), gen in zip(live, generations, strict=True):
                following = self._apply(episode, env, messages, gen, cost)
                if following is not None:
                    still.append((episode, env, following))
                elif episode.outcome is not None:
                    done_at[id(episode)] = time.perf_counter()
                    episode.wall_s = done_at[id(episode)] - start
            cost.env_s += time.perf_counter() - t0
            live = still
            turn += 1
        for group in groups:
            branches = group.branches
            ends = [done_at[id(ep)] for ep in branches]
            group.span_s = max(ends) - min(ends)
            group.barrier_idle_s = sum(max(ends) - e for e in ends)
            if group.greedy is not None and any(len(ep.actions) > 1 for ep in branches):
                group.greedy_diverged = all(
                    ep.actions[:1] != group.greedy.actions[:1] for ep in group.sampled
                )
        return RolloutBatch.from_groups(groups, self.k, cost)

    def _apply(
        self,
        episode: Episode,
        env: Any,
        messages: list[dict[str, str]],
        gen: Any,
        cost: RolloutCost,
        partial: int = 0,
    ) -> list[dict[str, str]] | None:
        """Append one generation to ``episode`` and play it in ``env``: the conversation to
        continue from (the env answered and the episode goes on), or None (it ended; its
        outcome, if any, is set). ``partial``: how many of the episode's last ids are this
        turn's tokens generated before ``gen`` (a continuation from inside a turn)."""
        ids = list(gen.token_ids)
        turn_ids = (episode.token_ids[len(episode.token_ids) - partial :] if partial else []) + ids
        episode.token_ids += ids
        episode.action_mask += [1] * len(ids)
        episode.logprobs += list(gen.logprobs)
        cost.tokens_generated += len(ids)
        if episode.kind == "greedy":
            cost.greedy_tokens += len(ids)
        content_ids = turn_ids[:-1] if turn_ids and turn_ids[-1] in self.stop else turn_ids
        action = self.tokenizer.decode(content_ids, skip_special_tokens=False)
        episode.actions.append(action)
        following = None
        if gen.finish_reason != "stop":
            _, _, _, _, info = env.truncate("max_tokens")
            episode.truncated = True
        else:
            obs, _, terminated, truncated, info = env.step(action)
            if not (terminated or truncated):
                added = self.chat.continuation(obs["messages"], len(messages) + 1)
                episode.token_ids += added
                episode.action_mask += [0] * len(added)
                episode.logprobs += [0.0] * len(added)
                following = list(obs["messages"])
        episode.statuses.append(info["status"])
        if "outcome" in info:
            episode.outcome = info["outcome"]
            episode.truncated = episode.truncated or info["outcome"].status.value == "truncated"
        return following

    def starts_within(
        self,
        episode: Episode,
        task_seed: int,
        positions: Sequence[int],
        copies: int = 1,
        key: Callable[[int], int] = lambda i: i,
    ) -> list[Start]:
        """The states before the action tokens at ``positions`` (indices into the episode's
        ids) of ``episode``, collected from ``task_seed``: ``copies`` starts each (branches
        0 .. copies - 1, keyed by ``key(position)``), each with its own fork of the env at the
        start of the position's turn, rebuilt by replaying the episode's actions (the env's
        tool results and random state come back exactly)."""
        env = self.make_env()
        obs, _ = env.reset(seed=task_seed)
        turns = [(env.unwrapped.fork(), list(obs["messages"]))]  # the env at each turn's start
        for action in episode.actions[:-1]:
            obs, *_ = env.step(action)
            turns.append((env.unwrapped.fork(), list(obs["messages"])))
        env.close()
        wanted = set(positions)
        starts, turn, run = [], -1, 0
        for i, action in enumerate(episode.action_mask):
            if not action:
                run = 0
                continue
            turn += int(run == 0)
            if i in wanted:
                base, messages = turns[turn]
                for c in range(copies):
                    starts.append(Start(base.fork(), episode.token_ids[:i], messages, run, key(i), c))  # fmt: skip
            run += 1
        if len(starts) != copies * len(wanted):
            raise ValueError("every position must be an action token of the episode")
        return starts

    def finish(
        self,
        starts: Sequence[Start],
        stream: str,
        step: int = 0,
        greedy: bool = False,
        cost: RolloutCost | None = None,
    ) -> list[Episode]:
        """Run each of ``starts`` (a state inside an episode) to the episode's end, all of them
        batched turn by turn as :meth:`collect` runs groups: the Monte Carlo continuations of
        a value estimate. A start's env is used up (pass a fork); its sampling seeds are keyed
        by ``(stream, step, start.key, start.branch, turn)``, the turn counted from the start
        (``greedy``: no sampling; a greedy episode's remainder comes back token for token).
        Returns one episode per start: the start's ids, then the continuation (its action
        mask 1), its outcome set. ``cost``, if given, adds up the tokens and seconds spent."""
        cost = RolloutCost() if cost is None else cost
        live = []
        for start in starts:
            episode = Episode(
                group=start.key, branch=start.branch, kind="greedy" if greedy else "sampled", task_id="",
                token_ids=list(start.token_ids), action_mask=[0] * len(start.token_ids),
                logprobs=[0.0] * len(start.token_ids), prompt_len=len(start.token_ids),
                weight_version=self.policy.weight_version,
            )  # fmt: skip
            if start.partial > self.max_new_tokens:
                raise ValueError(f"a start {start.partial} tokens into a turn of at most {self.max_new_tokens}")  # fmt: skip
            live.append((episode, start.env, list(start.messages), start.partial))
        out = [ep for ep, *_ in live]
        turn = 0
        while live:
            requests = []
            for episode, _, _, partial in live:
                params = self._params(episode, stream, step, turn, episode.group)
                budget = self.max_new_tokens - partial
                requests.append(GenerationRequest(tuple(episode.token_ids), replace(params, max_new_tokens=budget)))  # fmt: skip
            t0 = time.perf_counter()
            generations = self.policy.generate(requests) if requests else []
            cost.generate_s += time.perf_counter() - t0
            cost.turns += 1
            still = []
            t0 = time.perf_counter()
            for (episode, env, messages, partial), gen in zip(live, generations, strict=True):
                following = self._apply(episode, env, messages, gen, cost, partial)
                if following is not None:
                    still.append((episode, env, following, 0))
            cost.env_s += time.perf_counter() - t0
            live, turn = still, turn + 1
        return out

    def _params(
        self, episode: Episode, stream: str, step: int, turn: int, key: int
    ) -> SamplingParams:
        if episode.kind == "greedy":
            return SamplingParams(
                max_new_tokens=self.max_new_tokens, greedy=True, stop_token_ids=self.stop
            )
        return SamplingParams(
            max_new_tokens=self.max_new_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            stop_token_ids=self.stop,
            seed=sampling_seed(self.seed, stream, step, key, episode.branch, turn),
        )
