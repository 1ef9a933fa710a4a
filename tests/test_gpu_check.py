"""The prepared GPU check (benchmarks/gpu_check.py) runs end to end in its dry mode on the CPU,
so it cannot rot before a GPU is at hand."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_gpu_check_runs_every_section_in_its_dry_mode(tmp_path):
    cmd = [sys.executable, "benchmarks/gpu_check.py", "--device", "cpu", "--dry", "--out", str(tmp_path)]  # fmt: skip
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    sections = report["sections"]
    assert set(sections) == {"parity", "grpo", "device_noise", "determinism", "prefix_sharing", "prefix_sharing_long", "fsdp", "logprob_head", "weight_packing"}  # fmt: skip
    assert not [name for name, r in sections.items() if "error" in r]
    assert sections["parity"]["max_abs_logprob_diff_device_shared_vs_full_fp32"] < 1e-4
    assert sections["grpo"]["mean"]["tokens_trained"] > 0
    assert sections["device_noise"]["same_tokens_for_same_seeds"]  # on the CPU, always
    assert sections["determinism"]["default/cpu_noise_same_tokens"]
    fsdp = sections["fsdp"]
    assert fsdp["sharded"] and fsdp["max_abs_weight_change_of_the_update"] > 0
    assert fsdp["max_abs_weight_diff_vs_plain_after_one_update"] <= 1e-5
    assert sections["logprob_head"]["gradients_equal"]
    assert (tmp_path / "gpu_check.txt").read_text().startswith("forkgym GPU check")
