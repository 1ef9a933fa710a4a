"""``wandb=true``: the same per-step metrics as TensorBoard, the config, a finished run; read
back from the offline run's own record, not taken on trust."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from forkgym.agents.run.runlog import read_metrics
from forkgym.cli import app

pytestmark = pytest.mark.integrations
pytest.importorskip("wandb")  # forkgym[wandb]: `python3 dev.py test-integrations`

runner = CliRunner()


def wandb_records(path: Path) -> list[Any]:
    """The protobuf records of an offline run's ``run-*.wandb`` file (a ``:W&B`` header, then
    LevelDB-log framing: 32 KiB blocks of records with a 7-byte header, split across blocks
    as FIRST/MIDDLE/LAST pieces)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    records, pos, block, pending = [], 7, 32768, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if left < 7 or (length == 0 and kind == 0):  # a block's zero padding
            pos += left
            continue
        pending += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL, LAST
            record = pb.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def item_key(item: Any) -> str:
    return item.key or "/".join(item.nested_key)


def test_wandb_offline_logs_the_metrics_config_and_finishes(tmp_path, monkeypatch, warm_model_dir):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    run = tmp_path / "run"
    args = ["train", "--model", str(warm_model_dir), "--env", "Arithmetic-v0", "--steps", "2",
            "--out", str(run), "--no-progress", "env_kwargs.system_prompt=null",
            "env_kwargs.operations=+", "prompts_per_step=2", "k=2", "max_new_tokens=6",
            "eval_every=2", "eval_episodes=2", "eval_k=0", "wandb=true",
            "wandb_project=forkgym-test", "wandb_run_name=tiny-rloo"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output

    files = list((tmp_path / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 1, files
    assert files[0].name == f"run-{(run / 'wandb_run_id').read_text().strip()}.wandb"
    records = wandb_records(files[0])
    kinds = [r.WhichOneof("record_type") for r in records]

    (started,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert started.project == "forkgym-test" and started.display_name == "tiny-rloo"
    config = {item_key(i): json.loads(i.value_json) for i in started.config.update}
    assert config["env"] == "forkgym/Arithmetic-v0" and config["steps"] == 2
    assert config["env_kwargs"] == {"system_prompt": None, "operations": "+"}

    history = [
        {item_key(i): json.loads(i.value_json) for i in r.history.item}
        for r in records
        if r.WhichOneof("record_type") == "history"
    ]
    logged = read_metrics(run)
    assert [h["_step"] for h in history] == [m["step"] for m in logged] == [0, 1, 2]
    for h, m in zip(history, logged, strict=True):
        numeric = {
            k: v for k, v in m.items() if isinstance(v, (int, float)) and k != "step"
        }  # what TensorBoard gets
        assert {k: v for k, v in h.items() if not k.startswith("_")} == pytest.approx(numeric)
    assert "eval_accuracy" in history[0] and "reward_mean" not in history[0]  # None: left out
    assert {"reward_mean", "grad_norm", "time/step"} <= set(history[1])
    assert "reduction" not in history[1]  # a string, as TensorBoard leaves it out
    assert kinds[-1] == "exit" and records[-1].exit.exit_code == 0

    # a resumed run continues the same W&B run, from the step after its checkpoint
    wandb_id = (run / "wandb_run_id").read_text().strip()
    resumed = runner.invoke(app, [*args[:6], "3", *args[7:], "--resume", "eval_every=0"])
    assert resumed.exit_code == 0, resumed.output
    assert (run / "wandb_run_id").read_text().strip() == wandb_id
    (later,) = set((tmp_path / "wandb").glob("offline-run-*/run-*.wandb")) - set(files)
    assert later.name == f"run-{wandb_id}.wandb"
    steps = [
        json.loads(i.value_json)
        for r in wandb_records(later)
        if r.WhichOneof("record_type") == "history"
        for i in r.history.item
        if item_key(i) == "_step"
    ]
    assert steps == [3]
