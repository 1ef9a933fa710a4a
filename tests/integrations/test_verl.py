"""verl's custom reward function, called exactly as verl's reward manager calls it."""

import inspect
import os

os.environ.setdefault("FORKGYM_VERL_TIMEOUT", "1")  # read when the first call builds the verifier

from forkgym.integrations.verl import compute_score


def test_the_signature_is_verls():
    params = list(inspect.signature(compute_score).parameters)
    assert params == ["data_source", "solution_str", "ground_truth", "extra_info"]


def test_keyword_call_as_verls_reward_manager_makes_it():
    got = compute_score(
        data_source="openai/gsm8k",
        solution_str=r"... so the answer is $\boxed{72}$.",
        ground_truth="72",
        extra_info={"split": "train", "index": 0},
    )
    assert got == {"score": 1.0, "acc": 1.0, "invalid": 0.0, "infra_failure": 0.0}


def test_wrong_invalid_numeric_truth_and_a_timeout_are_kept_apart():
    assert compute_score("gsm8k", r"\boxed{71}", "72")["score"] == 0.0
    assert compute_score("gsm8k", "no final answer", "72")["invalid"] == 1.0
    assert compute_score("math", r"\boxed{2}", 2)["acc"] == 1.0  # a number as ground truth
    hard = compute_score("math", r"\boxed{9^{9^{9^{9}}}}", "3")  # runs into the time limit
    assert hard == {"score": 0.0, "acc": 0.0, "invalid": 0.0, "infra_failure": 1.0}
