"""`check_url`: one line for each way a store URL cannot work, and nothing created."""

from __future__ import annotations

import importlib.util
import socket

import pytest

from forkgym.store import StoreURLError, check_url


def test_a_workable_sqlite_url_passes_and_creates_nothing(tmp_path):
    target = tmp_path / "new" / "deeper" / "o.db"
    assert check_url(f"sqlite:///{target}").database == str(target)
    assert not (tmp_path / "new").exists()
    check_url("sqlite://")  # in memory
    check_url("sqlite:///:memory:")


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("foo://x", "unknown database dialect 'foo'"),
        ("postgresql+nodriver://u@h/db", "unknown driver 'nodriver' for postgresql"),
        ("not a url", "is not a database URL"),
    ],
)
def test_what_sqlalchemy_cannot_load_is_named(url, message):
    with pytest.raises(StoreURLError, match=message) as caught:
        check_url(url)
    assert "\n" not in str(caught.value)


def test_a_sqlite_path_that_cannot_exist(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StoreURLError, match="is not a directory"):
        check_url(f"sqlite:///{blocker}/sub/o.db")
    with pytest.raises(StoreURLError, match="is a directory; name a file in it"):
        check_url(f"sqlite:///{tmp_path}")


@pytest.mark.skipif(importlib.util.find_spec("psycopg2") is not None, reason="psycopg2 installed")
def test_a_missing_driver_says_what_to_install():
    with pytest.raises(StoreURLError, match=r"No module named 'psycopg2'.*forkgym\[postgres\]"):
        check_url("postgresql+psycopg2://u@127.0.0.1/db")


def test_an_unreachable_server_is_one_line_without_the_password():
    pytest.importorskip("psycopg", reason="needs the psycopg driver (forkgym[postgres])")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"postgresql+psycopg://forkgym:secret@127.0.0.1:{port}/db"
    with pytest.raises(StoreURLError, match="cannot reach the database at") as caught:
        check_url(url)
    assert "secret" not in str(caught.value) and "\n" not in str(caught.value)
    check_url(url, connect=False)  # parsing and the driver alone


def test_a_running_server_passes(postgres_url):
    assert check_url(postgres_url).get_backend_name() == "postgresql"
