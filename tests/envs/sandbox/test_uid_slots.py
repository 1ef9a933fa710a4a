"""The sandbox uid range (envs/sandbox/uid_slots.py): checked against the accounts, locked host-wide.
(Racing callers for one uid: tests/envs/sandbox/test_redteam.py.)"""

from __future__ import annotations

import os
import pwd

import pytest

from forkgym.envs.sandbox import uid_slots


@pytest.fixture
def uid_setting(monkeypatch):
    def set_range(value: str) -> None:
        monkeypatch.setenv("FORKGYM_SANDBOX_UIDS", value)
        uid_slots.uid_range.cache_clear()

    yield set_range
    uid_slots.uid_range.cache_clear()


def test_a_range_holding_an_accounts_uid_is_refused_with_the_fix(uid_setting):
    taken = next(p for p in pwd.getpwall() if p.pw_uid >= 1000)
    uid_setting(f"{taken.pw_uid}:1")
    with pytest.raises(
        ValueError, match=f"belongs to account '{taken.pw_name}'.*FORKGYM_SANDBOX_UIDS"
    ):
        uid_slots.uid_range()


@pytest.mark.parametrize("value", ["0:4", "5000:0", "5000", "x:y"])
def test_a_malformed_or_unsafe_range_is_refused(uid_setting, value):
    uid_setting(value)
    with pytest.raises(ValueError):
        uid_slots.uid_range()


def test_the_default_range_belongs_to_no_account():
    first, count = uid_slots.DEFAULT_RANGE
    assert uid_slots.uid_range() == (first, count) or os.environ.get("FORKGYM_SANDBOX_UIDS")
    for uid in range(first, first + count):
        with pytest.raises(KeyError):
            pwd.getpwuid(uid)


@pytest.mark.skipif(os.geteuid() != 0, reason="uid slots are root's")
def test_a_shared_lock_directory_is_refused(monkeypatch, tmp_path):
    shared = tmp_path / "locks"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setattr(uid_slots, "LOCK_DIR", shared)
    with pytest.raises(PermissionError, match="not shared"), uid_slots.uid_slot():
        pass


@pytest.mark.skipif(os.geteuid() != 0, reason="uid slots are root's")
def test_a_held_uid_is_not_handed_out_again(uid_setting):
    first = uid_slots.DEFAULT_RANGE[0]
    uid_setting(f"{first}:2")
    with uid_slots.uid_slot() as a, uid_slots.uid_slot() as b:
        assert {a, b} == {first, first + 1}
        busy = pytest.raises(uid_slots.SlotsBusy, match="FORKGYM_SANDBOX_UIDS")
        with busy, uid_slots.uid_slot(timeout=0.05):
            pass
    with uid_slots.uid_slot():  # released again
        pass
