import json

from typer.testing import CliRunner

from forkgym.cli import app
from forkgym.services.config import ServiceConfig
from forkgym.services.recording import Item, Recorder

runner = CliRunner()


def fill(url: str) -> None:
    recorder = Recorder(ServiceConfig(db_url=url, workers=1, timeout=2))
    items = [
        Item(reference=str(i), response=rf"\boxed{{{i % 3}}}", run_id="cli-run") for i in range(9)
    ]
    _, rows = recorder.prepare(items, "req")
    recorder.submit(rows).result()
    recorder.close()


def test_serve_help_lists_its_options():
    out = runner.invoke(app, ["serve", "--help"], terminal_width=200).stdout
    for option in (
        "--db",
        "--host",
        "--port",
        "--workers",
        "--timeout",
        "--token",
        "--preempt-after",
    ):
        assert option in out


def test_outcomes_counts_slowest_and_export(tmp_path):
    url = f"sqlite:///{tmp_path / 'o.db'}"
    fill(url)
    result = runner.invoke(app, ["outcomes", "--db", url, "--slowest", "2"], terminal_width=200)
    assert result.exit_code == 0, result.stdout
    assert (
        "outcomes: 9" in result.stdout
        and "correct" in result.stdout
        and "2 slowest" in result.stdout
    )
    out = tmp_path / "export.jsonl"
    result = runner.invoke(
        app, ["outcomes", "--db", url, "--run-id", "cli-run", "--export", str(out)]
    )
    assert result.exit_code == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 9 and {r["status"] for r in rows} == {"correct", "incorrect"}
    missing = runner.invoke(app, ["outcomes", "--db", f"sqlite:///{tmp_path / 'none.db'}"])
    assert missing.exit_code == 2
