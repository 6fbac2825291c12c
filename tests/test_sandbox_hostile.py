"""Hostile programs against the code sandbox.

Each program must end as a failure within its limit plus one second, leave nothing behind
(files, processes), and the caller must carry on: after every hostile run a normal run works.
Tests marked ``kernel_only`` switch the Python guards off to prove the kernel layer on its own.
"""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

from harness.sandbox import (
    CRASHED,
    MODULE_ERROR,
    OK,
    OUTPUT_LIMIT,
    RAISED,
    TIMEOUT,
    TOO_LARGE,
    UNSUPPORTED,
    CallResult,
    Limits,
    isolation_report,
    run_source,
)
from harness.sandbox.values import render

FAST = Limits(call_time=1.0, module_time=1.0, total_time=10.0)
KERNEL = isolation_report().get("mode") == "kernel"
kernel_only = pytest.mark.skipif(not KERNEL, reason="kernel isolation unavailable here (needs root and namespaces)")
BARE = Limits(call_time=1.0, module_time=1.0, total_time=10.0, python_guards=False, isolation="kernel")


def _uid_processes(uid: int) -> list[int]:
    """Pids of live processes of ``uid`` (from /proc)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            for line in (entry / "status").read_text().splitlines():
                if line.startswith("Uid:"):
                    if int(line.split()[1]) == uid:
                        pids.append(int(entry.name))
                    break
        except OSError:
            continue
    return pids


def _gone(uid: int, wait: float = 10.0) -> bool:
    # returns as soon as none is left; on a loaded machine the kernel takes seconds to tear down a
    # pid namespace that a fork bomb filled (3 s was too short at load 8)
    end = time.monotonic() + wait
    while time.monotonic() < end:
        if not _uid_processes(uid):
            return True
        time.sleep(0.05)
    return not _uid_processes(uid)


def hostile(source: str, call: str = "f()", limits: Limits = FAST, budget: float | None = None):
    """Run one hostile call, check the time bound and that a normal run still works afterwards."""
    t0 = time.monotonic()
    run = run_source(source, [call], limits)
    elapsed = time.monotonic() - t0
    bound = (budget if budget is not None else max(limits.call_time, limits.module_time)) + 1.0
    assert elapsed <= bound, f"hostile run took {elapsed:.2f}s > {bound:.2f}s"
    after = run_source("def g(x):\n    return x + 1\n", ["g(41)"], FAST)
    assert after.calls[0].status == OK and render(after.calls[0].value) == "42", "caller could not carry on"
    return run, run.calls[0]


def _failed(res: CallResult) -> bool:
    return res.status != OK


# ------------------------------------------------------------------ time
def test_infinite_loop_at_module_level():
    run, res = hostile("while True:\n    pass\n")
    assert run.module_status == TIMEOUT and res.status == MODULE_ERROR


def test_busy_cpu_loop_in_call():
    _, res = hostile("def f():\n    x = 0\n    while True:\n        x += 1\n")
    assert res.status == TIMEOUT


def test_sleeping_forever():
    _, res = hostile("import time\ndef f():\n    time.sleep(10**6)\n")
    assert res.status == TIMEOUT


def test_signal_tampering_ignores_sigterm_sigalrm_sigxcpu():
    src = (
        "import signal\n"
        "for s in (signal.SIGTERM, signal.SIGALRM, signal.SIGXCPU, signal.SIGINT, signal.SIGHUP):\n"
        "    signal.signal(s, signal.SIG_IGN)\n"
        "def f():\n    while True:\n        try:\n            pass\n        except BaseException:\n            pass\n"
    )
    _, res = hostile(src)
    assert res.status == TIMEOUT and "killed" in res.message


def test_cpu_limit_kills_a_busy_loop_that_ignores_signals():
    src = (
        "import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
        "def f():\n    while True:\n        pass\n"
    )
    lim = Limits(call_time=20.0, module_time=1.0, cpu_time=1, total_time=30.0)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    run = run_source(src, ["f()"], lim)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    res = run.calls[0]
    assert res.status == CRASHED and "SIGKILL" in res.message
    # The limit is CPU time (1 s soft, SIGKILL at 2 s): measured on the reaped children, not the
    # wall clock, which a loaded machine stretches.
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    assert cpu <= lim.cpu_time + 1 + 1.0, f"child used {cpu:.2f}s of CPU"
    assert run_source("def g():\n    return 1\n", ["g()"], FAST).calls[0].status == OK


def test_threads_spinning_after_return_do_not_hold_the_run():
    src = (
        "import threading\n"
        "def spin():\n    while True:\n        pass\n"
        "def f():\n    for _ in range(3):\n        threading.Thread(target=spin).start()\n    return 7\n"
    )
    run, res = hostile(src, budget=1.0)
    assert res.status == OK and render(res.value) == "7"


def test_atexit_tricks_do_not_run():
    marker = f"/tmp/eau_atexit_{uuid.uuid4().hex}"
    src = (
        f"import atexit, time\natexit.register(lambda: open({marker!r}, 'w').write('x'))\n"
        "atexit.register(lambda: time.sleep(10**6))\ndef f():\n    return 1\n"
    )
    _, res = hostile(src, budget=1.0)
    assert res.status == OK
    assert not os.path.exists(marker)


# ------------------------------------------------------------------ processes
def test_fork_bomb_guarded():
    src = "import os\ndef f():\n    while True:\n        os.fork()\n"
    _, res = hostile(src)
    assert res.status == RAISED and res.error == "PermissionError"


@kernel_only
def test_fork_bomb_contained_by_the_kernel_layer():
    src = (
        "import os\ndef f():\n    n = 0\n    while True:\n        try:\n            os.fork()\n"
        "            n += 1\n        except OSError:\n            pass\n"
    )
    run, res = hostile(src, limits=BARE)
    assert _failed(res)
    assert _gone(run.isolation["uid"]), "fork bomb processes survived the run"


def test_subprocess_spawning_guarded():
    _, res = hostile("import subprocess\ndef f():\n    return subprocess.run(['true']).returncode\n")
    assert res.status == MODULE_ERROR and res.error == "ImportError"
    _, res = hostile("import os\ndef f():\n    return os.system('true')\n")
    assert res.status == RAISED and res.error == "PermissionError"


@kernel_only
def test_spawned_process_dies_with_the_sandbox():
    # (no binaries are visible in the sandbox: the interpreter forks a detached child itself)
    src = (
        "import os, time\ndef f():\n    if os.fork() == 0:\n        os.setsid()\n        time.sleep(1000)\n"
        "        os._exit(0)\n    return 1\n"
    )
    run, res = hostile(src, limits=BARE)
    assert res.status == OK
    assert _gone(run.isolation["uid"]), "a detached child outlived the sandbox"


def test_ctypes_refused():
    _, res = hostile("import ctypes\ndef f():\n    return 1\n")
    assert res.status == MODULE_ERROR and res.error == "ImportError"


# ------------------------------------------------------------------ signals against the caller
@pytest.fixture
def sentinel():
    """A process of the caller's uid that hostile code must not be able to kill."""
    proc = subprocess.Popen(["sleep", "60"])
    yield proc
    proc.kill()
    proc.wait()


@pytest.mark.parametrize(
    "attack",
    [
        "os.kill(os.getppid(), signal.SIGKILL)",
        "os.killpg(0, signal.SIGKILL)",
        "os.kill(-1, signal.SIGKILL)",
        "os.killpg(os.getpgid(os.getppid() or 1), signal.SIGKILL)",
    ],
)
def test_signalling_the_caller_guarded(attack, sentinel):
    _, res = hostile(f"import os, signal\ndef f():\n    {attack}\n    return 1\n")
    assert res.status == RAISED and res.error == "PermissionError"
    assert sentinel.poll() is None


@kernel_only
@pytest.mark.parametrize(
    "attack",
    [
        "os.kill(os.getppid(), signal.SIGKILL)",
        "os.killpg(0, signal.SIGKILL)",
        "os.kill(-1, signal.SIGKILL)",
        f"os.kill({os.getpid()}, signal.SIGKILL)",
    ],
)
def test_signalling_the_caller_contained_by_the_kernel_layer(attack, sentinel):
    run, res = hostile(f"import os, signal\ndef f():\n    {attack}\n    return 1\n", limits=BARE)
    # Whatever the attack does inside the sandbox, the caller (this test) and its other
    # processes are alive, and the sandbox cannot see the caller's pid at all.
    assert sentinel.poll() is None
    assert res.status in (OK, RAISED, CRASHED)
    pid = run_source("import os\ndef f():\n    return [os.getpid(), os.getppid()]\n", ["f()"], BARE).calls[0]
    assert render(pid.value) == "[1, 0]"


# ------------------------------------------------------------------ memory, recursion, output
def test_memory_bomb():
    # A generous wall budget: the point is that the address-space limit stops it, quickly.
    lim = Limits(call_time=5.0, module_time=1.0, memory_bytes=256 << 20)
    _, res = hostile("def f():\n    x = []\n    while True:\n        x.append(bytearray(10**8))\n", limits=lim)
    assert res.status == RAISED and res.error == "MemoryError"


def test_deep_recursion_is_an_error_but_normal_recursion_works():
    _, res = hostile("def f(n=0):\n    return f(n + 1)\n")
    assert res.status == RAISED and res.error == "RecursionError"
    run = run_source("def depth(n):\n    return 0 if n == 0 else 1 + depth(n - 1)\n", ["depth(5000)"], FAST)
    assert render(run.calls[0].value) == "5000"


def test_gigabyte_prints():
    _, res = hostile("def f():\n    while True:\n        print('x' * 10**6)\n")
    assert res.status == OUTPUT_LIMIT


def test_huge_return_value():
    _, res = hostile("def f():\n    return list(range(10**6))\n")
    assert res.status in (TOO_LARGE, TIMEOUT)


def test_stdin_reads_get_eof():
    _, res = hostile("import sys\ndef f():\n    return input()\n", budget=1.0)
    assert res.status == RAISED and res.error == "EOFError"
    _, res = hostile("import sys\ndef f():\n    return sys.stdin.read()\n", budget=1.0)
    assert res.status == OK and render(res.value) == "''"


def test_exits():
    run, res = hostile("import os\ndef f():\n    os._exit(0)\n")
    assert res.status == CRASHED
    run, res = hostile("import sys\ndef f():\n    sys.exit(0)\n")
    assert res.status == RAISED and res.error == "SystemExit"
    run, res = hostile("import sys\nsys.exit(3)\ndef f():\n    return 1\n")
    assert run.module_status == RAISED and res.status == MODULE_ERROR


def test_crash_in_one_call_does_not_lose_the_others():
    run = run_source(
        "import os\ndef f(x):\n    if x == 1:\n        os._exit(9)\n    return x\n", ["f(0)", "f(1)", "f(2)"], FAST
    )
    assert [c.status for c in run.calls] == [OK, CRASHED, OK] and run.processes == 2


# ------------------------------------------------------------------ files
def test_writes_outside_the_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    name = f"eau_evil_{uuid.uuid4().hex}"
    for limits in [FAST, BARE] if KERNEL else [FAST]:
        for target in (f"/tmp/{name}", str(tmp_path / name), f"/dev/shm/{name}"):
            _, res = hostile(f"def f():\n    open({target!r}, 'w').write('x')\n    return 1\n", limits=limits)
            assert res.status == RAISED, (target, res)
        assert not os.path.exists(f"/tmp/{name}") and not list(tmp_path.iterdir())


def test_own_folder_is_writable_and_thrown_away(tmp_path):
    lim = Limits(call_time=1.0, module_time=1.0, tmp_root=str(tmp_path))
    run = run_source(
        "import os, sqlite3\ndef f():\n    c = sqlite3.connect('t.db')\n    c.execute('create table t(x)')\n"
        "    c.commit()\n    open('a.txt', 'w').write('x')\n    return sorted(os.listdir('.'))\n",
        ["f()"],
        lim,
    )
    assert render(run.calls[0].value) == "['a.txt', 't.db']"
    assert list(tmp_path.iterdir()) == []


def test_huge_file_write():
    _, res = hostile(
        "def f():\n    with open('big', 'wb') as fh:\n        for _ in range(100):\n"
        "            fh.write(b'x' * 10**6)\n    return 1\n"
    )
    assert res.status == RAISED and res.error == "OSError"  # EFBIG: RLIMIT_FSIZE, SIGXFSZ ignored


def test_deleting_files_of_the_caller(tmp_path):
    victim = tmp_path / "keep.txt"
    victim.write_text("precious")
    for limits in [FAST, BARE] if KERNEL else [FAST]:
        _, res = hostile(f"import os, shutil\ndef f():\n    os.remove({str(victim)!r})\n    return 1\n", limits=limits)
        assert res.status == RAISED
        _, res = hostile(
            f"import shutil\ndef f():\n    shutil.rmtree({str(tmp_path)!r})\n    return 1\n", limits=limits
        )
        assert res.status == RAISED
    assert victim.read_text() == "precious"


@kernel_only
def test_repository_and_data_are_hidden():
    here = str(Path(__file__).resolve())
    _, res = hostile(f"def f():\n    return open({here!r}).read()[:10]\n")
    assert res.status == RAISED and res.error in ("FileNotFoundError", "PermissionError")


# ------------------------------------------------------------------ network, environment
def test_network_is_unreachable():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(5)
    srv.settimeout(0.2)
    port = srv.getsockname()[1]
    hits = []

    def accept():
        try:
            hits.append(srv.accept())
        except OSError:
            pass

    try:
        for limits in [FAST, BARE] if KERNEL else [FAST]:
            t = threading.Thread(target=accept)
            t.start()
            _, res = hostile(
                f"import socket\ndef f():\n    s = socket.create_connection(('127.0.0.1', {port}), timeout=0.5)\n"
                "    s.sendall(b'hi')\n    return 1\n",
                limits=limits,
            )
            t.join()
            assert res.status in (RAISED, TIMEOUT), res
        assert not hits, "the sandbox reached a loopback server"
    finally:
        srv.close()


def test_environment_secrets_do_not_reach_the_code(monkeypatch):
    monkeypatch.setenv("EAU_TEST_SECRET_TOKEN", "hunter2")
    _, res = hostile("import os\ndef f():\n    return sorted(os.environ.items())\n", budget=1.0)
    assert res.status == OK
    assert "hunter2" not in str(res.value) and "EAU_TEST_SECRET_TOKEN" not in str(res.value)


# ------------------------------------------------------------------ faking results
def test_fake_equality_objects_are_rejected():
    src = (
        "class Eq:\n    def __eq__(self, other):\n        return True\n    __hash__ = object.__hash__\n"
        "class I(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\n"
        "def f():\n    return Eq()\ndef g():\n    return I(3)\ndef h():\n    return [I(3)]\n"
    )
    run = run_source(src, ["f()", "g()", "h()"], FAST)
    assert [c.status for c in run.calls] == [UNSUPPORTED] * 3
    ref = run_source("def f():\n    return 5\n", ["f()"], FAST).calls[0]
    assert not run.calls[0].matches(ref)


def test_monkeypatched_builtins_cannot_fake_a_pass():
    src = (
        "import builtins, json\nbuiltins.isinstance = lambda *a: True\nbuiltins.repr = lambda x: '5'\n"
        "json.dumps = lambda *a, **k: '5'\nclass Eq:\n    def __eq__(self, o):\n        return True\n"
        "def f():\n    return Eq()\n"
    )
    cand = run_source(src, ["f()"], FAST).calls[0]
    ref = run_source("def f():\n    return 5\n", ["f()"], FAST).calls[0]
    assert not cand.matches(ref)


def test_forged_result_lines_fail_the_call():
    src = (
        "import os\ndef f():\n    for fd in range(3, 12):\n        try:\n            os.write(fd, b'garbage\\n')\n"
        "        except OSError:\n            pass\n    return 1\n"
    )
    run, res = hostile(src)
    assert res.status in (CRASHED, OK)


def test_forged_values_cannot_crash_the_caller():
    # Writes records that parse as JSON but are not valid encodings (or are nested too deeply).
    src = (
        "import os\nFD = [fd for fd in range(3, 20) if os.path.exists(f'/proc/self/fd/{fd}')]\n"
        "def f(kind):\n"
        '    rec = {\'bad\': b\'{"kind":"call","index":0,"status":"ok","value":["f","zz"]}\\n\',\n'
        '           \'deep\': b\'{"kind":"call","index":0,"status":"ok","value":\' + b\'[\' * 100000 + b\'\\n\'}[kind]\n'
        "    for fd in FD:\n        try:\n            os.write(fd, rec)\n        except OSError:\n            pass\n"
        "    return 1\n"
    )
    for kind in ("bad", "deep"):
        run = run_source(src, [f"f({kind!r})"], FAST)
        assert run.calls[0].status in (CRASHED, OK)
        if run.calls[0].status == OK:
            assert render(run.calls[0].value) == "1"
    assert render(run_source("def g():\n    return 2\n", ["g()"], FAST).calls[0].value) == "2"
