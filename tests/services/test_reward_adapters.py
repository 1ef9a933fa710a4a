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
