"""Other frameworks' reward-server shapes, over real sockets: OpenRLHF's remote reward model."""

import sqlite3

import httpx
import pytest
import torch

from .conftest import start_server

PROMPT = "<|im_start|>user\nCompute 2 + 3.<|im_end|>\n<|im_start|>assistant\n"


def openrlhf_body(responses, labels):
    """Exactly what OpenRLHF's remote reward client POSTs: the full texts, the prompts, the
    labels (references)."""
    return {"query": [PROMPT + r for r in responses], "prompts": [PROMPT] * len(responses), "labels": labels}  # fmt: skip


def test_openrlhf_get_reward_grades_the_response_after_the_prompt(server):
    body = openrlhf_body([r"so \boxed{5}", r"\boxed{6}", "no answer", r"\boxed{9^{9^{9^{9}}}}"], ["5", "5", "5", "3"])  # fmt: skip
    reply = httpx.post(f"{server.url}/get_reward", json=body, timeout=60)
    assert reply.status_code == 200, reply.text
    data = reply.json()
    assert data["statuses"] == ["correct", "incorrect", "invalid", "timeout"]
    assert data["rewards"] == [1.0, 0.0, 0.0, 0.0] == data["scores"]  # the timeout: null_reward
    assert torch.tensor(data["rewards"]).shape == (4,)  # what OpenRLHF does with them
    con = sqlite3.connect(server.db)
    try:
        marks = ",".join("?" * len(data["ids"]))
        query = f"select status from verification_outcomes where task_id = 'openrlhf' and id in ({marks})"  # fmt: skip
        recorded = con.execute(query, data["ids"]).fetchall()
    finally:
        con.close()
    assert sorted(s for (s,) in recorded) == ["correct", "incorrect", "invalid", "timeout"]


def test_openrlhf_labels_as_they_come_numbers_and_null_are_graded_not_refused(server):
    """OpenRLHF sends its label column as it is (issue 26: a number got 422, which its client
    retries five times and then trains without a reward); a null (or, without --label_key,
    empty) label is `invalid` with its reason, still a 200 and a float."""
    body = openrlhf_body([r"\boxed{72}", r"\boxed{0.5}", r"\boxed{5}", r"\boxed{5}", r"\boxed{5}"], [72, 0.5, None, "", "5"])  # fmt: skip
    reply = httpx.post(f"{server.url}/get_reward", json=body, timeout=60)
    assert reply.status_code == 200, reply.text
    data = reply.json()
    assert data["statuses"] == ["correct", "correct", "invalid", "invalid", "correct"]
    assert data["rewards"] == [1.0, 1.0, 0.0, 0.0, 1.0]
    for outcome_id in data["ids"][2:4]:
        record = httpx.get(f"{server.url}/v1/outcomes/{outcome_id}").json()
        assert record["details"] == {"reason": "no_reference"} and record["status"] == "invalid"


def test_openrlhf_a_label_of_any_type_costs_only_its_own_sample(server):
    """Issue 48: a list or object label made the whole request a 422 (OpenRLHF retries five
    times, then stores no reward for any sample of it), and `true` was read as the answer 1.
    Now each unusable label is its own sample's `invalid`, with the reason recorded."""
    labels = ["72", 72, 72.0, [72], {"answer": 72}, True, None, "x" * 100_000]
    body = openrlhf_body([r"\boxed{72}"] * len(labels), labels)
    reply = httpx.post(f"{server.url}/get_reward", json=body, timeout=60)
    assert reply.status_code == 200, reply.text
    data = reply.json()
    assert data["statuses"] == ["correct"] * 3 + ["invalid"] * 5
    assert data["rewards"] == [1.0] * 3 + [0.0] * 5
    assert data["extra_logs"]["status_invalid"] == [0.0] * 3 + [1.0] * 5
    why = [httpx.get(f"{server.url}/v1/outcomes/{i}").json()["details"] for i in data["ids"][3:]]
    assert why[:3] == [{"reason": "unusable_label", "label": kind} for kind in ("a JSON list", "a JSON object", "a boolean")]  # fmt: skip
    assert why[3] == {"reason": "no_reference"}
    assert why[4]["reason"] == "unusable_label" and why[4]["label"].startswith("text longer than")


def test_openrlhf_reads_per_sample_statuses_in_extra_logs(server):
    """OpenRLHF keeps `extra_logs` (not top-level keys) and makes a tensor of each value: one
    number per sample under each status's key."""
    body = openrlhf_body([r"\boxed{5}", r"\boxed{6}", "none", r"\boxed{9^{9^{9^{9}}}}"], ["5", "5", "5", "3"])  # fmt: skip
    logs = httpx.post(f"{server.url}/get_reward", json=body, timeout=60).json()["extra_logs"]
    names = ["correct", "incorrect", "invalid", "truncated", "timeout", "error"]
    assert sorted(logs) == sorted(f"status_{name}" for name in names)
    assert logs["status_correct"] == [1.0, 0.0, 0.0, 0.0]
    assert logs["status_incorrect"] == [0.0, 1.0, 0.0, 0.0]
    assert logs["status_invalid"] == [0.0, 0.0, 1.0, 0.0]
    assert logs["status_timeout"] == [0.0, 0.0, 0.0, 1.0]
    assert all(torch.tensor([value]).dtype == torch.float32 for value in logs.values())


def test_openrlhf_without_prompts_grades_the_whole_query(server):
    reply = httpx.post(f"{server.url}/get_reward", json={"query": [r"\boxed{7}"], "labels": ["7"]})
    assert reply.json()["rewards"] == [1.0]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"query": ["a", "b"], "prompts": ["a"], "labels": ["1", "2"]}, "one entry per sample"),
        ({"query": ["a"], "labels": ["1", "2"]}, "one entry per sample"),
        ({"query": [], "labels": []}, "at least 1"),
        ({"prompts": ["a"], "labels": ["1"]}, "query"),
        ({"query": ["a"]}, "labels"),
    ],
)
def test_openrlhf_malformed_bodies_are_422_with_a_reason(server, body, message):
    reply = httpx.post(f"{server.url}/get_reward", json=body)
    assert reply.status_code == 422 and message in reply.text


def test_null_reward_fail_answers_503_naming_the_samples(tmp_path):
    srv = start_server(tmp_path / "o.db", "--workers", "1", "--timeout", "1", "--null-reward", "fail")  # fmt: skip
    try:
        body = openrlhf_body([r"\boxed{5}", r"\boxed{9^{9^{9^{9}}}}"], ["5", "3"])
        reply = httpx.post(f"{srv.url}/get_reward", json=body, timeout=60)
        assert reply.status_code == 503 and "samples [1]" in reply.text and "timeout" in reply.text
        ok = httpx.post(f"{srv.url}/get_reward", json=openrlhf_body([r"\boxed{5}"], ["5"]))
        assert ok.json()["rewards"] == [1.0]  # and it keeps serving
    finally:
        srv.stop()
