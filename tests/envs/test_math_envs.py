import json

import gymnasium as gym
import pytest

import forkgym.envs  # noqa: F401
from forkgym.envs.arithmetic import curriculum
from forkgym.envs.dataset import MathDatasetEnv, load_rows
from forkgym.envs.exact_eval import evaluate


def test_curriculum_levels_grow_in_turn():
    assert [curriculum(level) for level in range(5)] == [(1, 2), (2, 2), (2, 3), (3, 3), (3, 4)]
    env = gym.make("forkgym/Arithmetic-v0", level=4)
    env.reset(seed=0)
    numbers = env.unwrapped.task.data["expression"].split()[::2]
    assert len(numbers) == 4 and all(len(n) == 3 for n in numbers)
    with pytest.raises(ValueError):
        gym.make("forkgym/Arithmetic-v0", operations="+^")


def test_arithmetic_answers_are_exact_including_division():
    env = gym.make("forkgym/Arithmetic-v0", digits=2, terms=4, operations="+-*/")
    for seed in range(200):
        env.reset(seed=seed)
        task = env.unwrapped.task
        assert evaluate(task.data["expression"]) == evaluate(task.answer)


def test_instruction_off_shortens_the_prompt_and_keeps_the_task():
    full = gym.make("forkgym/Arithmetic-v0", system_prompt=None)
    bare = gym.make("forkgym/Arithmetic-v0", system_prompt=None, instruction=False)
    obs_full, info_full = full.reset(seed=3)
    obs_bare, info_bare = bare.reset(seed=3)
    question = obs_bare["messages"][-1]["content"]
    assert (
        obs_full["messages"][-1]["content"] == question + " Put your final answer within \\boxed{}."
    )
    assert question.startswith("Compute ") and question.endswith(".")
    assert info_full["task_id"] == info_bare["task_id"]  # the same task, worded shorter
    assert full.unwrapped.task.answer == bare.unwrapped.task.answer
    gold = bare.unwrapped.gold_action()
    assert bare.step(gold)[1] == 1.0


def test_word_problem_solutions_check_out_line_by_line():
    env = gym.make("forkgym/WordProblems-v0", steps=5)
    for seed in range(200):
        env.reset(seed=seed)
        task = env.unwrapped.task
        previous = None
        for line in task.data["steps"]:
            left, right = line.split(" = ")
            assert evaluate(left) == int(right) >= 0
            if previous is not None:
                assert left.split()[0] == previous  # each step starts from the last result
            previous = right
        assert previous == task.answer


def test_dataset_formats_and_row_ids(tmp_path):
    path = tmp_path / "mixed.jsonl"
    rows = [
        {"id": "a", "question": "2+2?", "answer": "Add them <<2+2=4>>.\n#### 4"},
        {"problem": "Half of 1?", "solution": "It is $\\boxed{\\frac{1}{2}}$."},
        {"question": "3*3?", "answer": 9},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    env = MathDatasetEnv(path=str(path))
    assert list(env.tasks) == ["mixed:a", "mixed:2", "mixed:3"]
    gsm = env.tasks["mixed:a"]
    assert gsm.answer == "4" and "<<" not in gsm.solution and gsm.solution.endswith("$\\boxed{4}$.")
    assert env.tasks["mixed:2"].answer == "\\frac{1}{2}" and env.tasks["mixed:3"].answer == "9"
    env.reset(options={"task_id": "mixed:2"})
    assert env.step(env.gold_action())[4]["status"] == "correct"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("not json", "line 1: not valid JSON"),
        ('{"answer": "1"}', "line 1: needs a non-empty 'question'"),
        ('{"question": "q"}', "line 1: needs an 'answer'"),
        ('{"problem": "p", "solution": "no box"}', "no \\\\boxed"),
    ],
)
def test_dataset_errors_name_the_line(tmp_path, line, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(ValueError, match=message):
        load_rows(str(path))


def test_dataset_identity_includes_the_file_contents(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"question": "1+1?", "answer": "2"}) + "\n")
    env = MathDatasetEnv(path=str(path))
    env.reset(seed=0)
    state = env.get_state()
    path.write_text(json.dumps({"question": "1+1?", "answer": "3"}) + "\n")
    with pytest.raises(ValueError, match="does not fit"):
        MathDatasetEnv(path=str(path)).set_state(state)
    with pytest.raises(FileNotFoundError, match="neither a file nor one of"):
        MathDatasetEnv(path=str(tmp_path / "missing.jsonl"))


def test_bundled_samples_gold_answers_all_verify():
    for name in ("gsm8k-sample", "math-sample"):
        env = MathDatasetEnv(path=name)
        for task_id in env.tasks:
            env.reset(options={"task_id": task_id})
            assert env.step(env.gold_action())[4]["status"] == "correct", task_id
