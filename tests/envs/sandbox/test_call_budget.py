"""One call cannot change another's result: the budget a call gets holds for all of its
processes together (socket memory, CPU share, CPU time), and what it can read of the host does
not tell it when other calls run. Driven through the sandbox's public entry point, with the
interpreter's audit hook switched off first (``HOOK_OFF``), as an attacker would.

Timing here is relative, never absolute: a neighbour beside a 62-process spinner is compared
with the same neighbour beside a one-process spinner, measured in the same test, so a busy
machine slows both alike (each call's group is one scheduling entity, however many processes
it holds). The absolute figure (beside the spinner, against alone, on an idle machine) is in
docs/environments.md.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest

from forkgym.envs.sandbox import SandboxLimits, cgroups, containment, run_python
from forkgym.envs.sandbox.isolation import available
from tests.envs.sandbox.test_redteam import HOOK_OFF

pytestmark = pytest.mark.skipif(available() is not None, reason=f"no OS sandbox: {available()}")
REPO = str(Path(__file__).resolve().parents[3])
GROUP = cgroups.hierarchy()


def _sockstat_bytes() -> int:
    """Host-wide TCP and UDP buffer memory (pages in /proc/net/sockstat), in bytes."""
    total = 0
    for line in Path("/proc/net/sockstat").read_text().splitlines():
        proto, _, rest = line.partition(":")
        if proto in ("TCP", "UDP"):
            fields = rest.split()
            total += int(fields[fields.index("mem") + 1]) * 4096
    return total


# the flood: connected TCP pairs with raised buffers and a UDP receive queue, filled
# until the kernel stops taking; prints what it managed (or why it could not start)
SOCKET_FLOOD = (
    HOOK_OFF
    + """
import os, socket
queued = 0
try:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
except OSError as exc:
    print('tcp refused', exc.errno)
else:
    listener.bind(('127.0.0.1', 0)); listener.listen(16)
    pairs = []
    for _ in range(10):
        a = socket.create_connection(listener.getsockname()); b, _ = listener.accept()
        for s in (a, b):
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 << 20)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 20)
            s.setblocking(False)
        pairs.append((a, b))
    for a, b in pairs:
        try:
            while queued < (256 << 20):
                queued += a.send(b'x' * 65536)
        except OSError:
            pass
    print('tcp queued', queued)
try:
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
except OSError as exc:
    print('udp refused', exc.errno)
import time
time.sleep(1.5)
"""
)


def test_socket_buffers_stay_inside_the_memory_budget_as_the_host_sees_it():
    """TCP and UDP buffers are the memory a cgroup v1 does not charge by default: the sandbox
    refuses ``AF_INET``/``AF_INET6`` (its loopback reaches nothing), so host-wide socket
    memory, sampled from outside during the call, grows by less than ``memory_mb``."""
    before = _sockstat_bytes()
    peak = [before]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _sockstat_bytes())
            time.sleep(0.05)

    watcher = threading.Thread(target=sample)
    watcher.start()
    try:
        result = run_python(SOCKET_FLOOD, SandboxLimits(memory_mb=128, wall_seconds=10))
    finally:
        done.set()
        watcher.join()
    assert "tcp refused 97" in result.stdout and "udp refused 97" in result.stdout, result
    assert peak[0] - before < 128 << 20, (before, peak[0])


@pytest.mark.skipif(GROUP is None, reason="no writable cgroup: the memory budget is per process")
def test_unix_socket_buffers_are_charged_to_the_call():
    """``AF_UNIX`` stays (``socketpair``, asyncio's self-pipe): its buffers are kernel memory
    of the call, inside ``memory_mb``, so filling them ends in the memory limit, not in host
    memory."""
    code = (
        HOOK_OFF
        + """
import socket
pairs, queued = [], 0
try:
    for _ in range(400):
        a, b = socket.socketpair()
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
        a.setblocking(False)
        pairs.append((a, b))
        try:
            while True:
                queued += a.send(b'x' * 65536)
        except BlockingIOError:
            pass
except OSError as exc:
    print('stopped', exc.errno)
print('queued MiB', queued >> 20, flush=True)
"""
    )
    result = run_python(code, SandboxLimits(memory_mb=128, wall_seconds=20))
    queued = re.search(r"queued MiB (\d+)", result.stdout)
    # either the kernel's memory limit killed it, or it stopped short of the budget
    assert result.reason == "memory_limit" or (queued and int(queued.group(1)) < 128), result


SPINNER = (
    HOOK_OFF
    + """
import os, time
CHILDREN, SECONDS = {children}, {seconds}
for _ in range(CHILDREN):
    if os.fork() == 0:
        try:
            os.setsid()  # an autogroup of its own, were it allowed
        except OSError as exc:
            print('setsid', exc.errno, flush=True)
        t = time.monotonic()
        while time.monotonic() - t < SECONDS:
            pass
        os._exit(0)
t = time.monotonic()
while time.monotonic() - t < SECONDS:
    pass
"""
)
# about a second of CPU on this kind of machine; its output is what must not change
NEIGHBOUR = "n = 0\nfor i in range(12_000_000):\n    n += i % 7\nprint(n)"


def _beside(children: int) -> tuple[float, str, object]:
    """The neighbour's wall time and output while a call of ``children`` + 1 spinning
    processes runs beside it, and the spinner's result."""
    spinner: dict[str, object] = {}
    started = threading.Event()

    def spin() -> None:
        started.set()
        code = SPINNER.replace("{children}", str(children)).replace("{seconds}", "6")
        spinner["result"] = run_python(code, SandboxLimits(cpu_seconds=3, wall_seconds=8))

    thread = threading.Thread(target=spin)
    thread.start()
    started.wait()
    time.sleep(0.8)  # the spinner's processes are running
    t0 = time.perf_counter()
    result = run_python(NEIGHBOUR, SandboxLimits(cpu_seconds=20, wall_seconds=30))
    seconds = time.perf_counter() - t0
    thread.join()
    assert result.status == "tool_ok", result
    return seconds, result.stdout, spinner["result"]


@pytest.mark.slow
@pytest.mark.skipif(GROUP is None or not GROUP.cpu, reason="no cpu controller: best-effort")
def test_a_62_process_spinner_takes_no_more_cpu_from_a_neighbour_than_one_process_does():
    """Each call's processes share one CPU quota and one scheduling weight, and ``setsid``
    (an autogroup per process) is refused: 62 spinning processes slow a neighbouring call no
    more than one spinning process does, and leave its output unchanged."""
    one, out_one, _ = _beside(0)
    many, out_many, spinner = _beside(61)
    assert out_one == out_many
    assert "setsid 1" in spinner.stdout, spinner  # EPERM
    assert spinner.status == "tool_timeout", spinner  # its CPU budget, for the call as a whole
    assert many <= 1.5 * one + 0.5, (one, many)  # without the group: over 8x


@pytest.mark.skipif(GROUP is None, reason="no writable cgroup: CPU time is per process")
def test_cpu_seconds_bound_the_whole_call_not_each_process():
    """Four processes each under ``cpu_seconds`` of CPU: ``RLIMIT_CPU`` alone would let them
    use four times it; the call's group is stopped when they have used it together."""
    code = (
        HOOK_OFF
        + """
import os, time
kids = []
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        t = time.process_time()
        while time.process_time() - t < 0.8:
            pass
        os._exit(0)
    kids.append(pid)
t = time.process_time()
while time.process_time() - t < 0.8:
    pass
for pid in kids:
    os.waitpid(pid, 0)
print('all done')
"""
    )
    result = run_python(code, SandboxLimits(cpu_seconds=1, wall_seconds=30, cpus=2.0))
    assert (result.status, result.reason) == ("tool_timeout", "cpu_limit"), result
    assert "all done" not in result.stdout


SIDE_CHANNELS = (
    HOOK_OFF
    + """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
for name in ('stat', 'loadavg', 'meminfo', 'uptime', 'vmstat', 'interrupts', 'cgroups', 'locks'):
    try:
        print(name, len(open('/proc/' + name).read()))
    except OSError as exc:
        print(name, 'unreadable', exc.errno)
print('inotify', libc.inotify_init1(0), ctypes.get_errno())
buf = ctypes.create_string_buffer(256)
print('sysinfo', libc.sysinfo(buf), ctypes.get_errno())
print('sys', sorted(os.listdir('/proc/sys')))
print('cmdline', open('/proc/1/cmdline', 'rb').read().replace(b'\\0', b' ').decode())
print('mountinfo', open('/proc/self/mountinfo').read())
print('runner', open('/sandbox/runner.py').read(10) != '')
print('cpus', os.cpu_count())
"""
)


def test_the_host_load_other_calls_and_host_paths_are_not_readable():
    """Host-wide figures in /proc read empty, inotify (which would time other calls' start-up
    on the shared read-only binds) and ``sysinfo`` are refused, and neither the init's
    command line nor the mount table names a path of the checkout."""
    out = run_python(SIDE_CHANNELS).stdout
    for name in (
        "stat",
        "loadavg",
        "meminfo",
        "uptime",
        "vmstat",
        "interrupts",
        "cgroups",
        "locks",
    ):
        assert re.search(rf"^{name} 0$", out, re.M), out
    assert "inotify -1 1" in out and "sysinfo -1 1" in out, out  # EPERM
    assert "sys []" in out and "runner True" in out, out
    assert REPO not in out and "envs/sandbox" not in out and "forkgym" not in out, out
    assert re.search(r"^cpus \d+$", out, re.M), out  # the standard library still works


def test_control_without_the_os_walls_the_host_load_and_inotify_are_there():
    out = run_python(SIDE_CHANNELS, isolation="unsafe-local").stdout
    assert not re.search(r"^loadavg 0$", out, re.M), out
    assert re.search(r"^inotify \d+ ", out, re.M), out


def test_the_info_says_how_the_cpu_is_shared():
    info = containment(SandboxLimits(cpus=1.5), "bwrap")
    if GROUP is not None and GROUP.cpu:
        assert info["cpus"] == 1.5
    else:
        assert "best-effort" in info["cpus"]
