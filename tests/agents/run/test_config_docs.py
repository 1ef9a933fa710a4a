"""The configuration table of docs/training.md is TrainConfig's field metadata, rendered."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from forkgym.agents.run.config import SECTIONS, TrainConfig
from forkgym.agents.run.config_docs import BEGIN, END, config_table, replace_table

PAGE = Path(__file__).resolve().parents[3] / "docs" / "training.md"


def test_every_field_is_documented_once_in_a_known_section():
    for f in dataclasses.fields(TrainConfig):
        assert f.metadata.get("help"), f"{f.name} has no help"
        assert f.metadata.get("section") in SECTIONS, f"{f.name}: section {f.metadata.get('section')!r}"  # fmt: skip


def test_the_page_holds_the_generated_table():
    page = PAGE.read_text()
    assert replace_table(page, config_table()) == page, (
        "docs/training.md's configuration table differs from TrainConfig's field metadata: "
        "run `python -m forkgym.agents.run.config_docs`"
    )
    table = page.split(BEGIN, 1)[1].split(END, 1)[0]
    keys = [line.split("`")[1] for line in table.splitlines() if line.startswith("| `")]
    assert keys == [f.name for s in SECTIONS for f in dataclasses.fields(TrainConfig) if f.metadata["section"] == s]  # fmt: skip


def test_a_changed_field_changes_the_table():
    @dataclasses.dataclass
    class Extended(TrainConfig):
        extra: int = dataclasses.field(default=3, metadata={"help": "a new knob", "section": "learner"})  # fmt: skip

    table = config_table(Extended)
    assert table != config_table() and "| `extra` | 3 | a new knob |" in table
    with pytest.raises(ValueError, match="no generated configuration table"):
        replace_table("# a page without markers", table)
