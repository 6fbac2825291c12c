"""Child side of the code sandbox, run as ``python -s -S -c <this file's text> JOB_FD RESULT_FD``.

This file imports nothing from ``harness``: it runs in a fresh interpreter started by
``harness.sandbox`` and must work before (and after) it has dropped every privilege.

Sequence:

1. Read the job (a ``marshal``-ed dict from the trusted caller: source, calls, limits, workdir)
   from ``JOB_FD`` and close it.
2. Isolate. First of all the process asks the kernel to SIGKILL it when its caller dies
   (``PR_SET_PDEATHSIG``), and exits if the caller is already gone. In *kernel* mode (the caller is
   root and namespaces work) the process enters new mount, network, pid, IPC and UTS namespaces and
   forks; the forked process is pid 1 of the new pid namespace, tied to the first one in turn, so
   when either dies the kernel kills everything the sandbox started, ``kill(-1)`` reaches only the
   sandbox, and the caller's pid is invisible. Pid 1 builds the file system from an allow list: a
   fresh tmpfs root holding, read-only at their own paths, the standard library, the installed
   packages (site folders), the shared libraries' folders and any ``allow_paths``; a few device
   files; a private /proc; and the working directory, a size-limited tmpfs. The host's root is then
   detached (``pivot_root``): no other host path, and no mount point of the host, exists for the
   code. It then switches to a fresh unprivileged uid (so RLIMIT_NPROC is enforced: root is exempt
   from it). In *process* mode (not root, or namespaces refused) only the resource limits, the
   parent-death signal, the new session and the Python guards below apply: the code can read
   what the caller's uid can read (``isolation_report`` says so).
3. Set resource limits (CPU, address space, processes, file size, open files, no core files).
4. Install the Python guards: an audit hook (``sys.addaudithook``; it cannot be removed) that
   refuses process creation, signals, sockets, ctypes and file writes outside the working
   directory. Audit hooks are not a security boundary on their own (Python's documentation says
   so); they give clean errors, and the kernel layer is the boundary.
5. Execute the source once as a module named ``solution`` (so ``if __name__ == "__main__":``
   blocks do not run), then evaluate each call with its own time budget, writing one JSON line per
   outcome to ``RESULT_FD`` before the next call starts, so the caller can enforce per-call budgets
   from outside and restart after a call that had to be killed.

Values are serialised canonically (see ``encode``): only plain data types are accepted, read
through their base type's own methods, so an object that overrides ``__eq__``/``__repr__`` cannot
fake an equal result. Everything about a value that could raise or take long (exact forms of huge
or exotic numbers, keys of dict entries and set members) is computed here, under the call's time
budget; a value that cannot be encoded is ``unsupported``. The caller
(``harness.sandbox.values``) only compares the encodings' strings and short float texts.

Code written here could try to write forged result lines to ``RESULT_FD`` itself. That gains
nothing: a forged value is one the code could have returned, and malformed lines make the caller
fail the run.
"""

from __future__ import annotations

# Imports are kept to fast built-in modules: every sandbox run pays for them (json pulls in re,
# signal pulls in enum; _json and _signal are their C cores).
import _json
import _signal as signal
import marshal
import math
import os
import random
import resource
import sys
import time

HELLO, MODULE, CALL = "hello", "module", "call"
SANDBOX_MODULE_NAME = "solution"


# --------------------------------------------------------------------------- job and channel
def _read_all(fd: int) -> bytes:
    chunks = []
    while True:
        b = os.read(fd, 1 << 16)
        if not b:
            return b"".join(chunks)
        chunks.append(b)


def dumps(obj) -> str:
    """Compact JSON of plain records (None, bool, int, float, str, list, tuple, dict with str keys).
    The caller parses it with ``json``; strings are escaped to ASCII (lone surrogates included)."""
    if obj is None:
        return "null"
    if obj is True:
        return "true"
    if obj is False:
        return "false"
    t = type(obj)
    if t is str:
        return _json.encode_basestring_ascii(obj)
    if t is int:
        return int.__repr__(obj)
    if t is float:
        r = float.__repr__(obj)
        return r if r not in ("nan", "inf", "-inf") else "null"
    if t is list or t is tuple:
        return "[" + ",".join([dumps(x) for x in obj]) + "]"
    if t is dict:
        return "{" + ",".join([_json.encode_basestring_ascii(k) + ":" + dumps(v) for k, v in obj.items()]) + "}"
    raise TypeError(f"cannot encode {t.__name__}")


class _Channel:
    """Writes one JSON line per record to the result descriptor (unbuffered, whole lines)."""

    def __init__(self, fd: int):
        self.fd = fd

    def send(self, record: dict) -> None:
        data = (dumps(record) + "\n").encode()
        view = memoryview(data)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]


# --------------------------------------------------------------------------- kernel isolation
_CLONE_NEWNS, _CLONE_NEWNET, _CLONE_NEWPID = 0x00020000, 0x40000000, 0x20000000
_CLONE_NEWIPC, _CLONE_NEWUTS = 0x08000000, 0x04000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 16384, 1 << 18
_MNT_DETACH = 2
_PR_SET_PDEATHSIG = 1
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "arm64": 41}
# Device files the sandbox gets (bound read-write; the rest of /dev does not exist for it).
_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
# Where the dynamic loader finds the shared libraries of extension modules (sqlite3, ssl, ...).
_LIBRARY_PATHS = ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib", "/etc/ld.so.cache")


class _Libc:
    """The few libc calls Python 3.11's ``os`` lacks (unshare, mount, umount2, pivot_root, prctl)."""

    def __init__(self):
        import ctypes

        self._ctypes = ctypes
        self.lib = ctypes.CDLL(None, use_errno=True)

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            e = self._ctypes.get_errno()
            raise OSError(e, f"{what}: {os.strerror(e)}")

    def unshare(self, flags: int) -> None:
        self._check(self.lib.unshare(flags), "unshare")

    def mount(self, src: str | None, target: str, fstype: str | None, flags: int, data: str | None) -> None:
        enc = lambda s: None if s is None else s.encode()
        self._check(self.lib.mount(enc(src), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")

    def umount_detach(self, target: str) -> None:
        self._check(self.lib.umount2(target.encode(), _MNT_DETACH), f"umount {target}")

    def pivot_root(self, new_root: str, put_old: str) -> None:
        number = _SYS_PIVOT_ROOT.get(os.uname().machine)
        if number is None:
            raise OSError(0, f"pivot_root: unknown syscall number on {os.uname().machine}")
        self._check(self.lib.syscall(number, new_root.encode(), put_old.encode()), "pivot_root")

    def pdeathsig(self, sig: int) -> None:
        self._check(self.lib.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0), "prctl")


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _allowed_paths(job: dict) -> list[str]:
    """What the sandbox may see of the host, read-only: the standard library (this interpreter's
    sys.path: it runs with -S, so that is the stdlib and lib-dynload), the site folders the caller
    lists (installed packages), the task's extra folders, and the shared libraries' folders."""
    paths = [p for p in sys.path if p and os.path.isabs(p)]
    paths += list(job.get("site_dirs", [])) + list(job.get("allow_paths", [])) + list(_LIBRARY_PATHS)
    out = []
    for p in paths:
        if os.path.lexists(p):
            out.append(os.path.abspath(p))
    return sorted(set(out))


def _bind(libc: _Libc, root: str, source: str, fd: int, writable: bool = False) -> None:
    """Bind ``source`` (opened as ``fd`` before the new root covered anything) at the same path
    under ``root``; read-only unless ``writable``. Not recursive: mounts inside it stay out."""
    dest = root + source
    os.makedirs(os.path.dirname(dest), mode=0o755, exist_ok=True)
    if os.path.isdir(f"/proc/self/fd/{fd}"):
        os.makedirs(dest, mode=0o755, exist_ok=True)
    elif not os.path.exists(dest):
        open(dest, "w").close()
    libc.mount(f"/proc/self/fd/{fd}", dest, None, _MS_BIND, None)
    if not writable:
        libc.mount(None, dest, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV, None)


def _build_root(job: dict, libc: _Libc, report: dict) -> None:
    """Inside the new namespaces, as pid 1: a fresh tmpfs becomes ``/``; the allowed paths are bound
    into it read-only at their own paths (symbolic links such as /lib -> usr/lib are copied as
    links), plus the device files, a /proc of the new pid namespace and the working directory (a
    size-limited tmpfs owned by the sandbox uid). The old root is then detached: nothing else of
    the host's file system, and none of its mount points, exist for the sandbox."""
    workdir, uid, lim = job["workdir"], job["uid"], job["limits"]
    libc.mount("none", "/", None, _MS_REC | _MS_PRIVATE, None)
    allowed = _allowed_paths(job)
    links = {p: os.readlink(p) for p in allowed if os.path.islink(p)}
    dirs = [p for p in allowed if p not in links]
    dirs = [p for p in dirs if not any(o != p and _under(p, o) for o in dirs)]  # the outer bind covers them
    opened = {p: os.open(p, os.O_PATH | os.O_CLOEXEC) for p in (*dirs, *_DEVICES) if os.path.exists(p)}
    # The new root is mounted over the working directory's parent (it exists; this mount namespace
    # is private), so no host folder has to be made for it.
    root = os.path.dirname(workdir)
    libc.mount("tmpfs", root, "tmpfs", _MS_NOSUID, "size=1m,mode=0755")
    for path, fd in opened.items():
        _bind(libc, root, path, fd, writable=path in _DEVICES)
        os.close(fd)
    for path, target in links.items():
        os.makedirs(os.path.dirname(root + path), mode=0o755, exist_ok=True)
        os.symlink(target, root + path)
    os.symlink("/proc/self/fd", root + "/dev/fd")
    os.makedirs(root + "/proc", mode=0o555)
    libc.mount("proc", root + "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None)
    os.makedirs(root + workdir, mode=0o755)
    libc.mount(
        "tmpfs",
        root + workdir,
        "tmpfs",
        _MS_NOSUID | _MS_NODEV,
        f"size={int(lim['workdir_bytes'])},mode=0700,uid={uid},gid={uid}",
    )
    os.chdir(root)
    libc.pivot_root(".", ".")
    libc.umount_detach(".")  # the old root, stacked under the new one by pivot_root(".", ".")
    os.chdir("/")
    libc.mount(None, "/", None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID, None)
    report["filesystem"] = "allow_list"
    report["visible"] = sorted(opened) + sorted(links)
    report.update(_hide_project_package(libc, job))


def _hide_project_package(libc: _Libc, job: dict) -> dict:
    """This project's own package (the procedural tasks' generator) under an allowed site folder
    (a non-editable install) is covered by an empty folder: it must not be importable."""
    covered = []
    for site in job.get("site_dirs", []):
        for name in job.get("project_packages", []):
            path = os.path.join(site, name)
            if os.path.isdir(path):
                libc.mount(
                    "tmpfs", path, "tmpfs", _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, "size=4k,mode=0555"
                )
                covered.append(path)
    return {"covered": covered} if covered else {}


def _kernel_isolate(job: dict, libc: _Libc, report: dict) -> None:
    """Inside the new namespaces, as pid 1: the allow-list root, then drop to the sandbox uid."""
    uid = job["uid"]
    _build_root(job, libc, report)
    os.chdir(job["workdir"])
    _set_limits(job["limits"], nproc=True)
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    report["uid"] = os.getuid()
    report["pid_namespace"] = True
    report["network"] = "none"


def _enter_namespaces(job: dict, libc: _Libc | None, report: dict) -> bool:
    """Enter new namespaces and fork; returns True in the inner process (pid 1). The outer process
    waits for the inner one and exits with its status. False when namespaces are unavailable."""
    try:
        if libc is None:
            raise OSError(0, "libc is unavailable")
        libc.unshare(_CLONE_NEWNS | _CLONE_NEWNET | _CLONE_NEWPID | _CLONE_NEWIPC | _CLONE_NEWUTS)
    except OSError as exc:
        report["kernel_error"] = str(exc)
        return False
    # The working directory of kernel mode is a tmpfs inside the namespace: the empty host folder the
    # caller made goes now, so a caller killed mid-run leaves nothing behind.
    try:
        os.rmdir(job["workdir"])
    except OSError:
        pass
    life_r, life_w = os.pipe()
    pid = os.fork()
    if pid:
        os.close(life_r)
        for fd in (0, 1, 2, job["result_fd"]):
            try:
                os.close(fd)
            except OSError:
                pass
        _, status = os.waitpid(pid, 0)
        os._exit(os.waitstatus_to_exitcode(status) & 0xFF if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))
    os.close(life_w)
    report["lifeline_fd"] = life_r
    return True


def _arm_lifeline(libc: _Libc, fd: int) -> None:
    """Die with the outer process: PDEATHSIG (set after the uid change, which clears it), then make
    sure the outer one had not already gone (its end of the lifeline pipe closes when it does)."""
    import select

    libc.pdeathsig(signal.SIGKILL)
    ready, _, _ = select.select([fd], [], [], 0)
    if ready:
        os._exit(137)
    os.close(fd)


def _tie_to_caller(libc: _Libc | None, caller_pid: int, report: dict) -> None:
    """SIGKILL this process when the caller dies, whatever it died of (SIGKILL included); exit now
    if it is already gone. In kernel mode pid 1 of the sandbox is tied to this process in turn, and
    the kernel kills the whole pid namespace with its pid 1, so nothing of a sandbox outlives its
    caller. In process mode only this process is tied (the guards refuse process creation).
    The kernel sends the signal when the caller's *thread* that started this process ends, so
    callers run a sandbox from a thread that waits for it (``run_source`` does)."""
    try:
        if libc is None:
            raise OSError(0, "libc is unavailable")
        libc.pdeathsig(signal.SIGKILL)
        report["dies_with_caller"] = True
    except OSError as exc:
        report["dies_with_caller"] = False
        report["lifetime_error"] = str(exc)
    if os.getppid() != caller_pid:
        os._exit(137)


# --------------------------------------------------------------------------- resource limits
def _set_limits(lim: dict, nproc: bool) -> None:
    def setl(which: int, value: int) -> None:
        _, hard = resource.getrlimit(which)
        value = int(value)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(which, (value, value))

    cpu = int(lim["cpu_time"])
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    # Soft limit sends SIGXCPU (ignorable), the hard limit one second later SIGKILL.
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1 if hard == resource.RLIM_INFINITY else min(cpu + 1, hard)))
    setl(resource.RLIMIT_AS, lim["memory_bytes"])
    setl(resource.RLIMIT_FSIZE, lim["file_size_bytes"])
    setl(resource.RLIMIT_NOFILE, lim["open_files"])
    setl(resource.RLIMIT_CORE, 0)
    if nproc:
        setl(resource.RLIMIT_NPROC, lim["max_processes"])


# --------------------------------------------------------------------------- python guards
_BLOCKED_EVENTS = frozenset(
    {
        "os.fork",
        "os.forkpty",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.system",
        "os.startfile",
        "subprocess.Popen",
        "pty.spawn",
        "os.kill",
        "os.killpg",
        "signal.pthread_kill",
        "socket.__new__",
        "socket.bind",
        "socket.connect",
        "socket.getaddrinfo",
        "socket.gethostbyname",
        "socket.gethostbyaddr",
        "socket.sethostname",
        "ctypes.dlopen",
        "ctypes.dlsym",
        "ctypes.dlsym/handle",
        "ctypes.call_function",
        "ctypes.cdata",
        "ctypes.addressof",
        "os.chroot",
        "os.setuid",
    }
)
# _posixsubprocess.fork_exec starts processes without an audit event, so the module itself is refused
# (which makes `import subprocess` fail: sandboxed code has no business starting programs).
_BLOCKED_IMPORTS = frozenset({"_posixsubprocess", "_ctypes", "ctypes"})
_PATH_EVENTS = frozenset(
    {
        "os.remove",
        "os.rmdir",
        "os.mkdir",
        "os.rename",
        "os.chmod",
        "os.chown",
        "os.link",
        "os.symlink",
        "os.truncate",
        "os.utime",
        "shutil.rmtree",
        "os.chflags",
    }
)
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def _install_guards(workdir: str) -> None:
    """Audit hook refusing what sandboxed code has no business doing. Its state lives in default
    arguments (immutable values) so that it does not depend on module globals."""

    def _inside(path, _wd=os.path.realpath(workdir), _real=os.path.realpath, _fs=os.fsdecode) -> bool:
        if isinstance(path, int):
            return True  # an already open descriptor: it was checked when opened
        p = _real(_fs(path))
        return p == _wd or p.startswith(_wd + "/")

    def hook(
        event,
        args,
        _blocked=_BLOCKED_EVENTS,
        _imports=_BLOCKED_IMPORTS,
        _paths=_PATH_EVENTS,
        _wflags=_WRITE_FLAGS,
        _inside=_inside,
    ):
        if event in _blocked:
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "import":
            if args[0] in _imports:
                raise ImportError(f"sandbox: importing {args[0]} is not allowed")
        elif event == "open":
            path, mode, flags = args[0], args[1], args[2]
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or bool(
                isinstance(flags, int) and flags & _wflags
            )
            if writing and path is not None and not _inside(path):
                raise PermissionError(f"sandbox: writing outside the working directory is not allowed: {path!r}")
        elif event in _paths:
            for a in args[:2]:
                if isinstance(a, (str, bytes, os.PathLike)) and not _inside(a):
                    raise PermissionError(f"sandbox: {event} outside the working directory is not allowed: {a!r}")

    sys.addaudithook(hook)


# --------------------------------------------------------------------------- values
class Unsupported(Exception):
    """A value that is not plain data (its type name is the message), or one whose encoding failed."""


class TooLarge(Exception):
    """A value whose encoding exceeds the size budget."""


_DICT_TYPES_BY_NAME = {("collections", "OrderedDict"), ("collections", "defaultdict"), ("collections", "Counter")}
_BASES = (int, float, complex, str, bytes, bytearray, list, tuple, dict, set, frozenset)
# A Decimal's exact form is a ratio of integers: 10**exponent is computed, so the exponent is bounded.
MAX_DECIMAL_EXPONENT = 100_000
_SHOWN = 80  # characters of a number's display text


def _ratio(p: int, q: int) -> str:
    """Exact text of p/q: reduced, in hex (linear in the size, no int->decimal-str limit)."""
    g = math.gcd(p, q)
    if g > 1:
        p, q = p // g, q // g
    if q < 0:
        p, q = -p, -q
    return format(p, "x") if q == 1 else format(p, "x") + "/" + format(q, "x")


def _approx(p: int, q: int = 1) -> str:
    """p/q as a float's hex text; "+big"/"-big" past the float range (never close to anything)."""
    try:
        return float.hex(p / q)
    except OverflowError:
        return "+big" if (p < 0) == (q < 0) else "-big"


def _int_text(n: int) -> str:
    return int.__repr__(n) if n.bit_length() <= 3000 else f"<int of {n.bit_length()} bits>"


def _float_exact(x: float) -> str:
    if x != x:
        return "nan"
    if x in (math.inf, -math.inf):
        return "inf" if x > 0 else "-inf"
    return _ratio(*float.as_integer_ratio(x))


def _num(inexact: bool, exact: str, re: str, im: str, shown: str) -> list:
    return ["n", inexact, exact, re, im, shown if len(shown) <= _SHOWN else shown[: _SHOWN - 1] + "…"]


def encode_number(x, t) -> list | None:
    """The canonical node of a number: ``["n", inexact, exact, re, im, shown]``.

    exact: the value as a reduced hex ratio ("nan", "inf", "-inf"; complex "c<re>,<im>" unless its
    imaginary part is 0), so that equal numbers of any type have equal text; inexact: a non-integral
    or non-finite float, or a complex (these compare with a tolerance on ``re``/``im``, float hex
    texts); shown: display text. All the work that could raise or take long on a hostile value
    happens here, in the sandbox, under the call's timer. None for a type that is not a number."""
    if t is bool:
        return _num(False, "1" if x else "0", float.hex(float(x)), "0x0.0p+0", "True" if x else "False")
    if t is int:
        return _num(False, format(x, "x"), _approx(x), "0x0.0p+0", _int_text(x))
    if t is float:
        finite_int = math.isfinite(x) and float.is_integer(x)
        return _num(not finite_int, _float_exact(x), float.hex(x), "0x0.0p+0", float.__repr__(x))
    if t is complex:
        re, im = complex.real.__get__(x), complex.imag.__get__(x)
        exact = _float_exact(re) if im == 0 else "c" + _float_exact(re) + "," + _float_exact(im)
        return _num(True, exact, float.hex(re), float.hex(im), complex.__repr__(x))
    mod, name = t.__module__, t.__name__
    if mod == "decimal" and name == "Decimal":
        shown = "Decimal('" + str(x)[:_SHOWN] + "')"
        if x.is_nan():
            return _num(False, "nan", "nan", "0x0.0p+0", shown)
        if x.is_infinite():
            return _num(
                False, "-inf" if x.is_signed() else "inf", "-inf" if x.is_signed() else "inf", "0x0.0p+0", shown
            )
        exponent = x.as_tuple().exponent
        if type(exponent) is not int or abs(exponent) > MAX_DECIMAL_EXPONENT:
            raise TooLarge(f"Decimal exponent beyond ±{MAX_DECIMAL_EXPONENT}")
        p, q = x.as_integer_ratio()
        return _num(False, _ratio(int.__int__(p), int.__int__(q)), _approx(p, q), "0x0.0p+0", shown)
    if mod == "fractions" and name == "Fraction":
        p, q = int.__int__(x.numerator), int.__int__(x.denominator)
        if q == 0:
            raise Unsupported("Fraction with denominator 0")
        return _num(False, _ratio(p, q), _approx(p, q), "0x0.0p+0", f"Fraction({_int_text(p)}, {_int_text(q)})")
    return None


def _norm(enc: list) -> list:
    """The identity of an encoded value as a dict key or set member: numbers by exact value only."""
    tag = enc[0]
    if tag == "n":
        return ["n", enc[2]]
    if tag in ("l", "t"):
        return [tag, [_norm(e) for e in enc[1]]]
    if tag == "S":
        return ["S", [k for k, _ in enc[1]]]
    if tag == "d":
        return ["d", [[k, _norm(v)] for k, _, v in enc[1]]]
    if tag == "nd":
        return ["nd", enc[1], _norm(enc[2])]
    return enc


def key_of(enc: list) -> str:
    """Canonical text of a dict key or set member (1, 1.0, True and Decimal(1) have the same)."""
    return dumps(_norm(enc))


def encode(x, budget: list[int] | None = None, _depth: int = 0, _stack: set | None = None):
    """Canonical, JSON-ready encoding of plain data as ``[tag, payload...]``.

    Tags: N none, n number (bool, int, float, complex, Decimal, Fraction; see ``encode_number``), s
    str, y bytes or bytearray (hex), l list, t tuple, S set/frozenset (``[[key, member], ...]``
    sorted by key), d dict (``[[key, k, v], ...]`` sorted by key), dt/da/ti/td datetime types, nd
    numpy array, T a class (by qualified name). numpy scalars become Python scalars.
    A subclass of a plain type is accepted only when it keeps the base ``__eq__`` (namedtuple,
    IntEnum) and is read through the base type's own methods; anything else raises Unsupported.
    ``budget`` is a one-element list of remaining nodes (TooLarge when exhausted).
    """
    if budget is None:
        budget = [200_000]
    budget[0] -= 1
    if budget[0] < 0:
        raise TooLarge("value has too many elements")
    if _depth > 200:
        raise TooLarge("value nested too deeply")
    t = type(x)
    if x is None:
        return ["N"]
    number = encode_number(x, t)
    if number is not None:
        return number
    if t is str:
        return ["s", x]
    if t is bytes or t is bytearray:
        return ["y", x.hex()]
    stack = _stack if _stack is not None else set()
    if t in (list, tuple, set, frozenset, dict) or (t.__module__, t.__name__) in _DICT_TYPES_BY_NAME:
        if id(x) in stack:
            raise Unsupported("cyclic structure")
        stack.add(id(x))
        try:
            if t is list:
                return ["l", [encode(e, budget, _depth + 1, stack) for e in list.__iter__(x)]]
            if t is tuple:
                return ["t", [encode(e, budget, _depth + 1, stack) for e in tuple.__iter__(x)]]
            if t is set or t is frozenset:
                items = [
                    encode(e, budget, _depth + 1, stack)
                    for e in (set.__iter__(x) if t is set else frozenset.__iter__(x))
                ]
                return ["S", sorted(([key_of(e), e] for e in items), key=lambda ke: ke[0])]
            triples = []
            for k, v in dict.items(x):
                kenc = encode(k, budget, _depth + 1, stack)
                triples.append([key_of(kenc), kenc, encode(v, budget, _depth + 1, stack)])
            return ["d", sorted(triples, key=lambda kv: kv[0])]
        finally:
            stack.discard(id(x))
    if isinstance(x, type):
        # A class as a value (``type(v)`` results): equal when module and qualified name are.
        return ["T", f"{type.__getattribute__(x, '__module__')}.{type.__getattribute__(x, '__qualname__')}"]
    mod, name = t.__module__, t.__name__
    if mod == "datetime" and name in ("datetime", "date", "time"):
        return [{"datetime": "dt", "date": "da", "time": "ti"}[name], str.__str__(x.isoformat())]
    if mod == "datetime" and name == "timedelta":
        parts = [x.days, x.seconds, x.microseconds]
        if not all(type(p) is int and abs(p) < 1 << 62 for p in parts):
            raise Unsupported("timedelta with non-integer fields")
        return ["td", *parts]
    if mod == "numpy" or mod.startswith("numpy."):
        np = sys.modules.get("numpy")
        if np is not None and t is np.ndarray:
            if x.dtype.kind not in "biufcUS?":
                raise Unsupported(f"numpy.ndarray of dtype {x.dtype}")
            shape = [int(n) for n in x.shape]
            return ["nd", shape, encode(x.tolist(), budget, _depth + 1, stack)]
        if np is not None and isinstance(x, np.generic) and x.dtype.kind in "biufcUS?":
            return encode(x.item(), budget, _depth + 1, stack)
    for base in _BASES:
        if isinstance(x, base) and t.__eq__ is base.__eq__:
            return encode(_as_base(x, base), budget, _depth, stack)
    raise Unsupported(f"{mod}.{t.__qualname__}" if mod != "builtins" else t.__qualname__)


def _as_base(x, base):
    """An exact ``base`` instance holding ``x``'s data, read through the base type's methods."""
    if base is int:
        return int.__int__(x)
    if base is float:
        return float.__float__(x)
    if base is complex:
        return complex(float.__float__(complex.real.__get__(x)), float.__float__(complex.imag.__get__(x)))
    if base is str:
        return str.__str__(x)
    if base in (bytes, bytearray):
        return bytes.fromhex(base.hex(x))
    if base is list:
        return list(list.__iter__(x))
    if base is tuple:
        return tuple(tuple.__iter__(x))
    if base is set:
        return set(set.__iter__(x))
    if base is frozenset:
        return frozenset(frozenset.__iter__(x))
    return dict(dict.items(x))


def _error_name(exc: BaseException) -> str:
    try:
        t = type(exc)
        mod, name = type.__getattribute__(t, "__module__"), type.__getattribute__(t, "__qualname__")
        return str.__str__(name) if mod == "builtins" else f"{str.__str__(mod)}.{str.__str__(name)}"
    except BaseException:
        return "UnnamedError"


def _short(text: str, n: int = 300) -> str:
    text = str(text)
    return text if len(text) <= n else text[: n - 1] + "…"


# --------------------------------------------------------------------------- execution
class _CallTimeout(BaseException):
    """Raised by the interval timer inside a call that ran past its budget (BaseException so that
    ``except Exception`` in sandboxed code does not swallow it)."""


def _seed_for(base: int, text: str) -> str:
    return f"{base}:{text}"


def _seed_all(seed: str) -> None:
    # Identical seeds for reference and candidate: random-using code is reproducible, and a
    # candidate that uses randomness exactly like the reference gets the same values. A str seed
    # is hashed with SHA-512 by random itself: stable across runs and hash seeds.
    random.seed(seed)
    np = sys.modules.get("numpy")
    if np is not None:
        try:
            np.random.seed(random.Random(seed).getrandbits(32))
        except Exception:
            pass


def _timer(seconds: float) -> None:
    signal.setitimer(signal.ITIMER_REAL, max(float(seconds), 0.0))


def _on_alarm(signum, frame):
    raise _CallTimeout()


def _execute(job: dict, chan: _Channel) -> None:
    lim = job["limits"]
    sys.setrecursionlimit(int(lim["recursion_limit"]))
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an over-large write raises OSError instead of killing
    namespace = {"__name__": SANDBOX_MODULE_NAME, "__builtins__": __builtins__}
    seed = int(lim["seed"])
    value_bytes = int(lim["value_bytes"])
    t0 = time.perf_counter()
    try:
        _seed_all(_seed_for(seed, "<module>"))
        code = compile(job["source"], "<solution>", "exec")
        _timer(lim["module_time"])
        try:
            exec(code, namespace)
        finally:
            _timer(0)
        module = {"kind": MODULE, "ok": True}
    except _CallTimeout:
        module = {
            "kind": MODULE,
            "ok": False,
            "status": "timeout",
            "error": "Timeout",
            "message": f"module execution exceeded {lim['module_time']}s",
        }
    except BaseException as exc:  # SystemExit, SyntaxError, ImportError ... are outcomes
        module = {
            "kind": MODULE,
            "ok": False,
            "status": "raised",
            "error": _error_name(exc),
            "message": _safe_short(exc),
        }
    module["seconds"] = time.perf_counter() - t0
    chan.send(module)
    if not module["ok"]:
        return
    for index in range(int(job["start"]), len(job["calls"])):
        chan.send(_one_call(job["calls"][index], index, namespace, seed, float(lim["call_time"]), value_bytes))


def _one_call(call: str, index: int, namespace: dict, seed: int, budget: float, value_bytes: int) -> dict:
    rec = {"kind": CALL, "index": index}
    t0 = time.perf_counter()
    try:
        try:
            _seed_all(_seed_for(seed, call))
            code = compile(call, "<call>", "eval")
            _timer(budget)
            value = eval(code, namespace)
        finally:
            _timer(0)
        rec.update(_encoded(value, budget - (time.perf_counter() - t0), value_bytes))
    except _CallTimeout:
        rec.update(status="timeout", error="Timeout", message=f"call exceeded {budget}s")
    except BaseException as exc:
        rec.update(status="raised", error=_error_name(exc), message=_safe_short(exc))
    rec["seconds"] = time.perf_counter() - t0
    return rec


def _encoded(value, seconds_left: float, value_bytes: int) -> dict:
    """The outcome fields of a returned value. Encoding runs under the rest of the call's budget;
    whatever goes wrong in it (a hostile value, a limit) makes the value unsupported, never an
    outcome that could match a reference's exception."""
    try:
        try:
            _timer(max(seconds_left, 0.001))
            enc = encode(value)
            text = dumps(enc)
        finally:
            _timer(0)
        if len(text) > value_bytes:
            raise TooLarge(f"encoded value has {len(text)} bytes (limit {value_bytes})")
        return {"status": "ok", "value": enc}
    except _CallTimeout:
        return {
            "status": "timeout",
            "error": "Timeout",
            "message": "encoding the returned value exceeded the call's budget",
        }
    except TooLarge as exc:
        return {"status": "too_large", "error": "TooLarge", "message": _safe_short(exc)}
    except Unsupported as exc:
        return {
            "status": "unsupported",
            "error": "Unsupported",
            "message": f"returned a value of type {_safe_short(exc)}",
        }
    except BaseException as exc:
        return {
            "status": "unsupported",
            "error": "Unsupported",
            "message": f"the returned value could not be encoded ({_error_name(exc)}: {_safe_short(exc)})",
        }


def _safe_short(exc: BaseException) -> str:
    try:
        return _short(exc)
    except BaseException:  # a hostile exception whose __str__ raises
        return ""


def main() -> None:
    job_fd, result_fd = int(sys.argv[1]), int(sys.argv[2])
    report: dict = {"mode": "process", "filesystem": "host", "pid_namespace": False, "network": "host"}
    libc = _load_libc(report)
    _tie_to_caller(libc, int(sys.argv[3]), report)
    job = marshal.loads(_read_all(job_fd))
    os.close(job_fd)
    job["result_fd"] = result_fd
    # Started with -S: installed packages come from the site folders the caller lists; "" (the
    # working directory, put first by -c) goes last so a file there cannot shadow the stdlib.
    if sys.path and sys.path[0] == "":
        sys.path.pop(0)
    sys.path.extend(job.get("site_dirs", []))
    sys.path.append("")
    import builtins

    if not hasattr(builtins, "exit"):  # site.py normally provides these
        builtins.exit = builtins.quit = sys.exit
    report["guards"] = bool(job["python_guards"])
    mode = job["isolation"]
    if mode in ("auto", "kernel") and os.geteuid() == 0:
        if _enter_namespaces(job, libc, report):
            _kernel_isolate(job, libc, report)
            _arm_lifeline(libc, report.pop("lifeline_fd"))
            report["mode"] = "kernel"
    elif mode == "kernel":
        report["kernel_error"] = "kernel isolation needs root (namespaces and a uid change)"
    chan = _Channel(result_fd)
    if mode == "kernel" and report["mode"] != "kernel":
        chan.send({"kind": HELLO, "isolation": report, "fatal": report.get("kernel_error", "no kernel isolation")})
        os._exit(3)
    if report["mode"] == "process":
        os.chdir(job["workdir"])
        # RLIMIT_NPROC counts every process of the uid (and is not enforced for root), so it is
        # only set where the sandbox has its own uid.
        _set_limits(job["limits"], nproc=False)
    # Drop the references to libc before untrusted code runs.
    del libc
    for name in ("ctypes", "ctypes._endian", "_ctypes"):
        sys.modules.pop(name, None)
    if job["python_guards"]:
        _install_guards(os.getcwd())
    chan.send({"kind": HELLO, "isolation": report, "pid": os.getpid()})
    try:
        _execute(job, chan)
    finally:
        # os._exit: no atexit handlers, no waiting for threads the code left running.
        os._exit(0)


def _load_libc(report: dict) -> _Libc | None:
    try:
        return _Libc()
    except (OSError, ImportError) as exc:
        report["libc_error"] = str(exc)
        return None


if __name__ == "__main__":
    main()
