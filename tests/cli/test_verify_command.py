import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from forkgym import __version__
from forkgym.cli import app

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, list(args), catch_exceptions=False)


def test_version_and_help():
    result = invoke("--version")
    assert result.exit_code == 0 and result.stdout.strip() == f"forkgym {__version__}"
    assert "verify" in invoke("--help").stdout
    help_text = invoke("verify", "--help").stdout
    for option in ("--reference", "--response", "--input", "--output", "--timeout", "--workers"):
        assert option in help_text


def test_single_answer_text_and_json():
    result = invoke("verify", "--reference", "1/2", "--response", r"so \boxed{0.5}")
    assert result.exit_code == 0 and result.stdout.startswith("correct")
    result = invoke("verify", "-r", "7", "-s", "no answer", "--json")
    data = json.loads(result.stdout)
    assert data["status"] == "invalid" and data["reward"] == 0.0 and data["extracted"] is None


@pytest.mark.parametrize(
    "args",
    [
        (),
        ("--reference", "1"),
        ("--reference", "1", "--response", "x", "--sample"),
        ("--workers", "-1", "--reference", "1", "--response", "x"),
    ],
)
def test_bad_invocations_are_usage_errors(args):
    assert runner.invoke(app, ["verify", *args]).exit_code == 2


def test_file_mode_keeps_order_ids_and_fields(tmp_path):
    rows = [
        {"id": "a", "reference": "3", "response": r"\boxed{3}"},
        {"id": 2, "reference": r"\frac{1}{2}", "response": r"\boxed{0.25}", "extra": [1]},
        {"reference": "5", "response": "no box"},
        {"id": "d", "reference": "x^2+2x+1", "response": r"\boxed{(x+1)^2}"},
    ]
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    out = tmp_path / "sub" / "out.jsonl"
    result = invoke(
        "verify", "--input", str(src), "--output", str(out), "--workers", "1", "--batch-size", "3"
    )
    assert result.exit_code == 0, result.stdout
    graded = [json.loads(line) for line in out.read_text().splitlines()]
    assert [g["status"] for g in graded] == ["correct", "incorrect", "invalid", "correct"]
    for row, g in zip(rows, graded, strict=True):
        assert {k: g[k] for k in row} == row
        assert {"status", "reward", "extracted", "latency_ms"} <= set(g)
    assert graded[1]["extracted"] == "0.25" and graded[2]["extracted"] is None
    assert "4 graded" in result.stdout


def test_malformed_input_is_reported_and_nothing_is_written(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_bytes(
        b'{"reference": "1", "response": "\\\\boxed{1}"}\n'
        b"not json\n"
        b'{"reference": [1], "response": "x"}\n'
        b'["a list"]\n'
        b'{"response": "x"}\n'
        b'{"reference": "1", "response": "\xff"}\n'
    )
    out = tmp_path / "out.jsonl"
    result = runner.invoke(app, ["verify", "--input", str(src), "--output", str(out)])
    assert result.exit_code == 2
    for fragment in ("line 2: not valid JSON", "line 3: 'reference' must be a string or a number",
                     "line 4: expected a JSON object", "line 5: missing 'reference'",
                     "line 6: not valid UTF-8"):  # fmt: skip
        assert fragment in result.stderr
    assert not out.exists() and list(tmp_path.iterdir()) == [src]


def test_sample_through_the_real_entry_point(tmp_path):
    out = tmp_path / "sample.jsonl"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "forkgym",
            "verify",
            "--sample",
            "--timeout",
            "2",
            "--output",
            str(out),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    statuses = {json.loads(line)["status"] for line in out.read_text().splitlines()}
    assert statuses == {"correct", "incorrect", "invalid", "timeout", "error"}
    for status in ("correct", "timeout", "error"):
        assert status in proc.stdout


def test_a_numeric_reference_is_graded_as_its_text(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text(
        '{"reference": 2, "response": "\\\\boxed{2}"}\n{"reference": 0.5, "response": "\\\\boxed{1/2}"}\n'
    )
    out = tmp_path / "out.jsonl"
    result = runner.invoke(app, ["verify", "--input", str(src), "--output", str(out)])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["status"] for r in rows] == ["correct", "correct"]


def test_explain_shows_what_each_strategy_found():
    response = "She sold 48 + 24 = 72 clips. The answer is 72.\n#### 72"
    result = invoke(
        "verify", "-r", "72", "-s", response, "--preset", "gsm8k", "--explain", "--workers", "0"
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "strategies  gsm8k, boxed, answer_is (preset gsm8k); multi_box=list" in lines
    assert any(line.split()[:2] == ["gsm8k", "'72'"] and line.endswith("<- graded") for line in lines)  # fmt: skip
    assert any(line.split() == ["boxed", "nothing"] for line in lines)
    assert any(line.split()[:2] == ["answer_is", "'72'"] and "graded" not in line for line in lines)  # fmt: skip
    assert lines[-1].startswith("verdict     correct  reward=1")


def test_explain_names_a_cut_off_answer_and_a_list():
    result = invoke("verify", "-r", "42", "-s", r"So \boxed{42", "--preset", "lenient", "--explain", "--workers", "0")  # fmt: skip
    assert "none ran: unclosed answer" in result.stdout
    assert result.stdout.splitlines()[-1].startswith("verdict     invalid")
    result = invoke("verify", "-r", "$-2,1$", "-s", r"$\boxed{1}$ and $\boxed{-2}$", "--explain", "--json", "--workers", "0")  # fmt: skip
    report = json.loads(result.stdout)
    assert report["reference"]["parsed_as"] == r"\boxed{-2,1}"
    chosen = [a for a in report["response"]["attempts"] if a["chosen"]]
    assert chosen == [{"strategy": "boxed", "found": "1,-2", "span": [8, 26], "items": ["1", "-2"], "plain": False, "chosen": True}]  # fmt: skip
    assert report["outcome"]["status"] == "correct"


@pytest.mark.parametrize(
    "args",
    [
        ("--preset", "gsm"),
        ("--preset", "math", "--extract", "answer_is"),
        ("--multi-box", "all"),
    ],
)
def test_bad_extraction_options_are_usage_errors(args):
    result = runner.invoke(app, ["verify", "-r", "1", "-s", r"\boxed{1}", "--workers", "0", *args])  # fmt: skip
    assert result.exit_code == 2


def test_explain_needs_a_single_answer(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"reference": "1", "response": "1"}) + "\n")
    result = runner.invoke(app, ["verify", "-i", str(src), "-o", "-", "--explain"])
    assert result.exit_code == 2
