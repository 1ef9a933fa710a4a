"""forkgym inside TRL's GRPOTrainer: the dataset builder, the reward function and the
environment factory, each driven by the real TRL (two training steps on the tiny model)."""

from __future__ import annotations

import gymnasium as gym
import pytest

pytestmark = pytest.mark.integrations
trl = pytest.importorskip("trl", reason="needs TRL: python3 dev.py test-integrations")

from forkgym.integrations.trl import (  # noqa: E402
    EnvReward,
    env_dataset,
    env_rows,
    environment_factory,
)

ARITH = {"system_prompt": None, "operations": "+", "digits": 1}


def grpo_args(tmp_path, **extra):
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=str(tmp_path / "trl"),
        use_cpu=True,
        bf16=False,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        logging_steps=1,
        max_steps=2,
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=24,
        seed=0,
        **extra,
    )


def test_rows_are_the_envs_seeded_starts():
    rows = env_rows("forkgym/Arithmetic-v0", [3, 7], **ARITH)
    env = gym.make("forkgym/Arithmetic-v0", **ARITH)
    for row, seed in zip(rows, [3, 7], strict=True):
        obs, info = env.reset(seed=seed)
        assert row["prompt"] == [dict(m) for m in obs["messages"]]
        assert (row["task_id"], row["task_seed"]) == (info["task_id"], seed)
        assert row["answer"] == env.unwrapped.task.answer
    assert len(env_dataset("forkgym/Arithmetic-v0", 5, **ARITH)) == 5
    with pytest.raises(ValueError, match="no tools"):
        env_rows("forkgym/Arithmetic-v0", 1, template_tools=True)


def test_reward_grades_messages_and_text_and_keeps_statuses_apart():
    rows = env_rows("forkgym/Arithmetic-v0", 3, **ARITH)
    reward = EnvReward("forkgym/Arithmetic-v0", **ARITH)
    logged: dict[str, float] = {}
    completions = [
        [{"role": "assistant", "content": f"$\\boxed{{{rows[0]['answer']}}}$"}],
        f"The answer is $\\boxed{{{int(rows[1]['answer']) + 1}}}$.",  # wrong, plain text
        [{"role": "assistant", "content": "no idea"}],  # invalid: no final answer
    ]
    scores = reward(
        completions,
        task_id=[r["task_id"] for r in rows],
        log_metric=logged.__setitem__,
        answer=[r["answer"] for r in rows],  # other columns are passed and ignored
    )
    assert scores == [1.0, 0.0, 0.0]
    statuses = [o.status.value for o in reward.outcomes(completions, [r["task_id"] for r in rows])]
    assert statuses == ["correct", "incorrect", "invalid"]
    assert logged["forkgym/invalid"] == pytest.approx(1 / 3)
    assert logged["forkgym/timeout"] == 0.0
    # a conversation that ends on a tool result gave no answer: truncated, not wrong
    tool_end = [[{"role": "assistant", "content": "x"}, {"role": "tool", "content": "4"}]]
    assert reward.outcomes(tool_end, [rows[0]["task_id"]])[0].status.value == "truncated"
    with pytest.raises(ValueError, match="task_id"):
        reward(completions)


def test_reward_is_none_for_infrastructure_failures():
    """A verifier timeout scores None (TRL leaves it out of the sum), never 0 or 1."""
    from forkgym.verifiers import MathVerifier

    with MathVerifier(timeout=0.3, workers=1, cache_size=0) as slow:
        reward = EnvReward("forkgym/Arithmetic-v0", verifier=slow, **ARITH)
        rows = env_rows("forkgym/Arithmetic-v0", 2, **ARITH)
        bomb = "$\\boxed{9^{9^{9^{9}}}}$"  # symbolic comparison runs past the limit
        right = f"$\\boxed{{{rows[1]['answer']}}}$"
        scores = reward([bomb, right], task_id=[r["task_id"] for r in rows])
        assert reward.outcomes([bomb], [rows[0]["task_id"]])[0].status.value == "timeout"
    assert scores == [None, 1.0]


def test_environment_tools_run_the_envs_tools():
    from transformers.utils import get_json_schema

    make = environment_factory("forkgym/Calculator-v0")
    env = make()
    assert sorted(n for n in dir(type(env)) if not n.startswith("_")) == [
        "calculator",
        "env",
        "reset",
        "task_id",
    ]
    schema = get_json_schema(env.calculator)
    assert schema["function"]["name"] == "calculator"
    assert schema["function"]["parameters"]["properties"]["expression"]["type"] == "string"
    assert schema["function"]["parameters"]["required"] == ["expression"]
    row = env_rows("forkgym/Calculator-v0", [5], template_tools=True)[0]
    assert env.reset(**row) is None
    assert env.task_id == row["task_id"]
    expression = env.env.task.data["expression"]
    assert env.calculator(expression=expression) == row["answer"]
    assert env.calculator(expression=7).startswith("error:")  # wrong type: forkgym's message
    # the reward function grades against each environment's task
    reward = EnvReward("forkgym/Calculator-v0")
    final = [{"role": "assistant", "content": f"$\\boxed{{{row['answer']}}}$"}]
    assert reward([final], environments=[env]) == [1.0]
    with pytest.raises(ValueError, match="no tools"):
        environment_factory("forkgym/Arithmetic-v0")


def test_grpo_trainer_two_steps_with_dataset_and_reward(tmp_path, tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(tiny_model_dir),
        reward_funcs=EnvReward("forkgym/Arithmetic-v0", **ARITH),
        args=grpo_args(tmp_path),
        train_dataset=env_dataset("forkgym/Arithmetic-v0", 8, **ARITH),
        processing_class=tokenizer,
    )
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert len(logs) == 2
    assert all("forkgym/invalid" in entry for entry in logs)
    assert trainer.state.global_step == 2


def test_grpo_trainer_two_steps_with_environment_factory(tmp_path, tiny_model_dir):
    """TRL accepts forkgym's chat template for tool calling, renders the env's tools in it and
    runs the tool loop; the model's tool calls (if the untrained model makes any) run the
    environment's tools."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(tiny_model_dir),
        reward_funcs=EnvReward("forkgym/Calculator-v0"),
        args=grpo_args(tmp_path, max_tool_calling_iterations=2),
        train_dataset=env_dataset("forkgym/Calculator-v0", 8, template_tools=True),
        processing_class=tokenizer,
        environment_factory=environment_factory("forkgym/Calculator-v0"),
    )
    assert [t.__name__ for t in trainer.tools] == ["calculator"]
    trainer.train()
    assert trainer.state.global_step == 2


def test_trls_tool_loop_reads_and_runs_a_call(tiny_model_dir):
    """The steps of TRL's tool loop on forkgym's tokenizer, with a call the untrained model
    above would not write: the template passes TRL's checks, TRL's parser reads the env's gold
    call, the environment runs it, and the tool turn tokenises as a suffix of the prompt."""
    from transformers import AutoTokenizer
    from trl.chat_template_utils import is_chat_template_prefix_preserving, supports_tool_calling

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert supports_tool_calling(tokenizer) and is_chat_template_prefix_preserving(tokenizer)
    env = environment_factory("forkgym/Calculator-v0")()
    row = env_rows("forkgym/Calculator-v0", [11], template_tools=True)[0]
    env.reset(**row)
    gold = env.env.gold_action()
    parsed = tokenizer.parse_response(gold + "<|im_end|>", prefix="")
    (call,) = parsed["tool_calls"]
    result = getattr(env, call["function"]["name"])(**call["function"]["arguments"])
    assert result == row["answer"]
    tool = {"role": "tool", "name": "calculator", "content": result}
    before = row["prompt"] + [parsed]
    text = tokenizer.apply_chat_template(
        [*before, tool], tokenize=False, add_generation_prompt=True
    )
    assert text.startswith(tokenizer.apply_chat_template(before, tokenize=False))
    assert text.endswith(f"<|im_start|>tool\n{result}<|im_end|>\n<|im_start|>assistant\n")
