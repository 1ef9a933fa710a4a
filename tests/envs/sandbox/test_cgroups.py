"""The per-call cgroup (envs/sandbox/cgroups.py) on this machine's real hierarchy, v1 or v2: a plain
child process is put in a group and the kernel's limits are watched from outside.

(cgroup v2 was checked with the same steps on a machine that has it, as root under a systemd
style root with memory and pids enabled: groups under /sys/fs/cgroup/forkgym-0 with
memory.max, memory.swap.max=0, memory.oom.group=1 and pids.max; the same results.)"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from forkgym.envs.sandbox import cgroups

WHERE = cgroups.hierarchy()
pytestmark = pytest.mark.skipif(WHERE is None, reason=f"no writable cgroup: {cgroups.why_not()}")
MiB = 1 << 20

HOG = """
import os, sys, time
kids = []
for _ in range(int(sys.argv[1])):
    pid = os.fork()
    if pid == 0:
        block = bytearray(int(sys.argv[2]) << 20)
        for i in range(0, len(block), 4096):
            block[i] = 1
        time.sleep(1)
        os._exit(0)
    kids.append(pid)
for pid in kids:
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
"""


def _start(group: cgroups.CallGroup, code: str, *args: str) -> subprocess.Popen:
    """``code`` in a new Python that waits on stdin until it is in ``group``."""
    wait = "import sys; sys.stdin.read(1)\n"
    proc = subprocess.Popen(
        [sys.executable, "-S", "-c", wait + code, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    group.add(proc.pid)
    proc.stdin.write("g")
    proc.stdin.flush()
    return proc


def _members(group: cgroups.CallGroup) -> list[int]:
    return [int(p) for p in (group.dirs[-1] / "cgroup.procs").read_text().split()]


def test_the_groups_memory_counts_every_process_and_its_swap():
    group = cgroups.CallGroup(WHERE, 96 * MiB, 32)
    try:
        proc = _start(group, HOG, "3", "60")
        out, _ = proc.communicate(timeout=60)
        codes = [int(x) for x in out.split()]
        if WHERE.version == 2:  # memory.oom.group: an out-of-memory kill takes the whole group
            assert proc.returncode == -9 and not codes, (proc.returncode, codes)
        else:  # v1 kills processes one at a time until the rest fit
            assert codes.count(0) <= 1 and -9 in codes, codes
        assert group.oom_kills() >= 1
        peak = group.peak_memory()
        assert peak is None or peak <= 96 * MiB
    finally:
        group.close()
    assert not any(d.exists() for d in group.dirs)


def test_the_groups_process_count_stops_forks():
    group = cgroups.CallGroup(WHERE, 256 * MiB, 8)
    code = """
import os, time
n = 0
for _ in range(50):
    try:
        if os.fork() == 0:
            os.close(1)  # (the test reads stdout to its end)
            time.sleep(5)
            os._exit(0)
        n += 1
    except OSError:
        break
print(n)
"""
    try:
        proc = _start(group, code)
        out, _ = proc.communicate(timeout=60)
        assert int(out) == 7  # eight tasks: itself and seven children
    finally:
        group.close()  # and the sleeping children with it


def test_closing_kills_what_is_left_and_removes_the_group():
    group = cgroups.CallGroup(WHERE, 64 * MiB, 8)
    proc = _start(group, "import os, time\nos.setsid()\nos.fork()\ntime.sleep(60)")
    deadline = time.monotonic() + 30  # (a busy machine may take a while to start Python)
    while len(members := _members(group)) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(members) == 2
    group.close()
    assert proc.wait(timeout=5) == -9
    for pid in members:  # gone, or a zombie its parent has not reaped yet
        stat = Path(f"/proc/{pid}/stat")
        assert not stat.exists() or stat.read_text().split()[2] == "Z"
    assert not any(d.exists() for d in group.dirs)


def test_a_stale_group_of_the_same_name_is_reaped_before_reuse():
    stale = cgroups.CallGroup(WHERE, 64 * MiB, 8, name="slot-test-stale")
    proc = _start(stale, "import time\ntime.sleep(60)")
    fresh = cgroups.CallGroup(WHERE, 64 * MiB, 8, name="slot-test-stale")  # a crash's leftover
    try:
        assert proc.wait(timeout=5) == -9
        assert (fresh.dirs[-1] / "cgroup.procs").read_text() == ""
    finally:
        fresh.close()


def test_groups_are_made_only_under_forkgyms_own():
    for root in WHERE.roots:
        assert root.name.startswith("forkgym") and root.stat().st_uid == os.geteuid()
    group = cgroups.CallGroup(WHERE, 64 * MiB, 8)
    try:
        assert all(d.parent in WHERE.roots for d in group.dirs)
    finally:
        group.close()


@pytest.mark.skipif(WHERE is None or not WHERE.cpu, reason="no cpu controller here")
def test_the_groups_cpu_quota_holds_for_all_its_processes_together():
    """Two processes spinning for 1.5 s in a group of half a CPU: together they get at most
    about 0.75 CPU-seconds (an upper bound: a busy machine only lowers it), and the group
    counts the CPU time of both, the dead one included."""
    group = cgroups.CallGroup(WHERE, 64 * MiB, 8, cpus=0.5)
    spin = (
        "import os, time\nkid = os.fork()\nt = time.monotonic()\n"
        "while time.monotonic() - t < 1.5:\n    pass\n"
        "if kid:\n    os.waitpid(kid, 0)\n    print('done', flush=True)\n"
    )
    try:
        proc = _start(group, spin)
        out, _ = proc.communicate(timeout=60)
        assert out.strip() == "done"
        used = group.cpu_seconds()
        assert used is not None and 0.05 < used <= 0.5 * 1.5 + 0.15, used
    finally:
        group.close()


@pytest.mark.skipif(WHERE is None or WHERE.version != 1, reason="cgroup v1 only")
def test_on_v1_tcp_buffers_are_charged_to_the_group_too():
    """cgroup v1 charges TCP buffers to a group only once its ``memory.kmem.tcp`` limit is
    set (v2 charges socket memory by default): the call's budget is set there as well, beside
    seccomp's refusal of AF_INET inside the sandbox."""
    group = cgroups.CallGroup(WHERE, 96 * MiB, 8)
    try:
        tcp = WHERE.root("memory") / group.name / "memory.kmem.tcp.limit_in_bytes"
        if not tcp.exists():
            pytest.skip("this kernel has no memory.kmem.tcp")
        assert int(tcp.read_text()) == 96 * MiB
    finally:
        group.close()
