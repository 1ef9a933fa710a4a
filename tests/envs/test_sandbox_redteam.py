"""Red team: model-written code tries to escape the Python tool, through the env's public API.

Every attack first switches the runner's audit hook off from inside (it is not a wall, and
these tests must show that the operating system's walls hold without it); each is sent as the
``code`` of one ``python`` tool call of ``forkgym/PythonTool-v0`` and must be contained. The
control tests run two of the attacks in the unsafe local mode, where they succeed: the tests
can fail, and it is the OS sandbox that makes them pass.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
from pathlib import Path

import gymnasium as gym
import pytest

import forkgym.envs  # noqa: F401

pytestmark = pytest.mark.sandbox

HOOK_OFF = (
    "import sys\n"
    "m = sys.modules['__main__']\n"
    "for table in (m._PROCESS_EVENTS, m._BLOCKED_IMPORTS, m._PATH_EVENTS):\n"
    "    table.clear()\n"
)


def attack(code: str, isolation: str = "auto", seed: int = 0, **limits):
    """The tool's reply to ``code`` (after switching the hook off), the info, the env."""
    options = {"cpu_seconds": 2, "wall_seconds": 8.0, **limits}
    env = gym.make("forkgym/PythonTool-v0", isolation=isolation, **options)
    env.reset(seed=seed)
    obs, _, _, _, info = env.step(env.unwrapped.format_call("python", code=HOOK_OFF + code))
    return obs["messages"][-1]["content"], info, env


def test_root_commands_run_as_nobody_with_the_hook_off():
    reply, _, _ = attack("import os\nos.system('/usr/bin/id')\nprint('uid', os.getuid())")
    assert "uid=0(" not in reply and "uid 0" not in reply
    assert "uid 65534" in reply or os.geteuid() != 0, reply


@pytest.mark.skipif(os.geteuid() != 0, reason="the control needs root outside the sandbox")
def test_control_without_the_os_walls_the_same_code_is_root():
    reply, _, _ = attack("import os\nos.system('/usr/bin/id')", isolation="unsafe-local")
    assert "uid=0(" in reply  # the audit hook alone did not stop it


def test_dir_fd_writes_links_and_removes_cannot_reach_the_host(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    code = f"""
import os
for attempt in ("open", "link", "remove"):
    try:
        d = os.open({str(tmp_path)!r}, os.O_RDONLY)
        if attempt == "open":
            os.close(os.open("pwned", os.O_WRONLY | os.O_CREAT, dir_fd=d))
        elif attempt == "link":
            os.link("victim.txt", "pwned-link", src_dir_fd=d, dst_dir_fd=d)
        else:
            os.remove("victim.txt", dir_fd=d)
        print(attempt, "succeeded")
    except OSError as exc:
        print(attempt, "failed", exc)
"""
    reply, _, _ = attack(code)
    assert "succeeded" not in reply, reply
    assert victim.read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["victim.txt"]


def test_setns_into_the_parents_network_cannot_reach_its_loopback():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    code = f"""
import ctypes, os, socket
libc = ctypes.CDLL(None, use_errno=True)
for pid in (os.getppid(), 1):
    try:
        fd = os.open(f"/proc/{{pid}}/ns/net", os.O_RDONLY)
        print("setns", pid, libc.setns(fd, 0x40000000), ctypes.get_errno())
    except OSError as exc:
        print("open ns", pid, exc)
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=2)
    print("connected")
except OSError as exc:
    print("no connection", exc)
"""
    try:
        reply, _, _ = attack(code)
        with pytest.raises(TimeoutError):
            listener.accept()
    finally:
        listener.close()
    assert "connected\n" not in reply and "no connection" in reply, reply
    assert not re.search(r"setns \d+ 0 ", reply)  # every setns failed


def test_children_do_not_outlive_the_call_and_forks_are_bounded():
    marker = secrets.token_hex(8)
    code = f"""
import os, sys, time
pid = os.fork()
if pid == 0:
    os.setsid()
    if os.fork() == 0:
        sys.argv[0] = "{marker}"
        time.sleep(30)
    os._exit(0)
forks = 0
for _ in range(200):
    try:
        if os.fork() == 0:
            time.sleep(20)
            os._exit(0)
        forks += 1
    except OSError:
        break
print("forks", forks)
"""
    reply, _, _ = attack(code, wall_seconds=3.0)
    found = re.search(r"forks (\d+)", reply)
    if found and os.geteuid() == 0:  # a process limit needs a uid of its own (nobody)
        assert int(found.group(1)) < 200, reply
    survivors = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if marker.encode() in cmdline.read_bytes():
                survivors.append(cmdline.parent.name)
        except OSError:
            continue
    assert not survivors  # the PID namespace went with the sandbox
    users = [p for p in Path("/proc").glob("[0-9]*/status") if _uid(p) == 65534]
    assert not users, "a process of the sandbox's uid is still running"


def _uid(status: Path) -> int | None:
    try:
        for line in status.read_text().splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def test_signals_priorities_and_affinity_cannot_touch_the_environment():
    me = os.getpid()
    nice = os.getpriority(os.PRIO_PROCESS, me)
    code = f"""
import os, signal
for what, fn in (
    ("pidfd", lambda: signal.pidfd_send_signal(os.pidfd_open(os.getppid()), 9)),
    ("kill host pid", lambda: os.kill({me}, 9)),
    ("renice host pid", lambda: os.setpriority(os.PRIO_PROCESS, {me}, 19)),
    ("affinity host pid", lambda: os.sched_setaffinity({me}, {{0}})),
    ("kill all", lambda: os.kill(-1, 9)),
):
    try:
        fn()
        print(what, "done")
    except OSError as exc:
        print(what, "failed", exc)
"""
    reply, _, env = attack(code)
    assert "done" not in reply.replace("kill all done", ""), reply  # only its own sandbox
    assert os.getpriority(os.PRIO_PROCESS, me) == nice
    assert len(os.sched_getaffinity(me)) == len(os.sched_getaffinity(0))
    # and the environment is alive and answers the next call
    obs, *_ = env.step(env.unwrapped.format_call("python", code="print(6 * 7)"))
    assert "42" in obs["messages"][-1]["content"]


def test_the_parents_environment_variables_are_out_of_reach():
    # this process's environment as /proc shows it (what an escaped child would read)
    ours = Path(f"/proc/{os.getpid()}/environ").read_bytes().split(b"\0")
    entries = [e.decode("latin-1") for e in ours if len(e) > 16]
    code = """
import os
for pid in sorted({os.getppid(), 1} | {int(p) for p in os.listdir('/proc') if p.isdigit()}):
    try:
        print(open(f'/proc/{pid}/environ', 'rb').read().decode('latin-1'))
    except OSError as exc:
        print(pid, exc)
print(dict(os.environ))
"""
    reply, _, _ = attack(code)
    assert entries and not [e for e in entries if e in reply]


def test_files_outside_the_scratch_directory_are_invisible(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text(token := secrets.token_hex(16))
    code = f"""
import os
for path in ({str(secret)!r}, "/etc/passwd", "/etc/shadow", os.path.expanduser("~root")):
    try:
        print(path, open(path).read()[:200])
    except OSError as exc:
        print(path, "unreadable", exc)
print(sorted(os.listdir("/")))
"""
    reply, _, _ = attack(code)
    assert token not in reply and "root:x:0" not in reply
    assert "'work'" not in reply and "'home'" not in reply


def test_control_without_the_os_walls_host_files_are_readable(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text(token := secrets.token_hex(16))
    reply, _, _ = attack(f"print(open({str(secret)!r}).read())", isolation="unsafe-local")
    assert token in reply


MEMORY_SCAN = """
import os, re
found = set()
for pid in sorted({os.getppid(), 1} | {int(p) for p in os.listdir('/proc') if p.isdigit()}):
    try:
        maps = open(f'/proc/{pid}/maps').read().splitlines()
        mem = open(f'/proc/{pid}/mem', 'rb', 0)
    except OSError as exc:
        print('no access', pid, exc)
        continue
    for line in maps:
        span, perms = line.split()[:2]
        if 'rw' not in perms:
            continue
        lo, hi = (int(x, 16) for x in span.split('-'))
        try:
            mem.seek(lo)
            chunk = mem.read(min(hi - lo, 1 << 24))
        except OSError:
            continue
        for m in re.finditer(rb'boxed\\{(\\d{3,})\\}', chunk):
            found.add(m.group(1).decode())
print('FOUND', sorted(found)[:20])
"""


def test_the_reward_cannot_be_read_from_the_environments_memory():
    """The attack that scored 1.0 in 3 of 3 episodes: scan the parent's memory for the
    reference, then answer with it. Contained, it finds nothing and earns nothing."""
    for seed in range(3):
        reply, _, env = attack(MEMORY_SCAN, seed=seed)
        answer = env.unwrapped.task.answer
        assert answer not in reply, reply[:500]
        candidates = re.findall(r"'(\d+)'", reply.split("FOUND", 1)[-1])
        guess = candidates[0] if candidates else "0"
        _, reward, *_ = env.step(f"The answer is $\\boxed{{{guess}}}$.")
        assert reward < 1.0
