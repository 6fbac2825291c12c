"""Child side of the code sandbox, run as ``python -s -S -c <this file's text> JOB_FD RESULT_FD``.

This file imports nothing from ``harness``: it runs in a fresh interpreter started by
``harness.sandbox`` and must work before (and after) it has dropped every privilege.

Sequence:

1. Read the job (a ``marshal``-ed dict from the trusted caller: source, calls, limits, workdir)
   from ``JOB_FD`` and close it.
2. Isolate. In *kernel* mode (the caller is root and namespaces work) the process enters new
   mount, network, pid, IPC and UTS namespaces and forks; the forked process is pid 1 of the new
   pid namespace, so when it dies the kernel kills everything it started, ``kill(-1)`` reaches only
   the sandbox, and the caller's pid is invisible. It mounts a private /proc, a size-limited tmpfs
   as its working directory, hides given folders behind empty tmpfs mounts, makes every other
   mount read-only, and switches to a fresh unprivileged uid (so RLIMIT_NPROC is enforced: root
   is exempt from it). In *process* mode (not root, or namespaces refused) only the resource
   limits, the new session and the Python guards below apply.
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
fake an equal result. The caller (``harness.sandbox.values``) compares the encoded values.

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
_MS_NOATIME, _MS_NODIRATIME, _MS_RELATIME, _MS_STRICTATIME = 1024, 2048, 1 << 21, 1 << 24
_OPT_FLAGS = {"nosuid": _MS_NOSUID, "nodev": _MS_NODEV, "noexec": _MS_NOEXEC, "noatime": _MS_NOATIME,
              "nodiratime": _MS_NODIRATIME, "relatime": _MS_RELATIME, "strictatime": _MS_STRICTATIME}
_PR_SET_PDEATHSIG = 1


class _Libc:
    """The few libc calls Python 3.11's ``os`` lacks (unshare, mount, prctl)."""

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
        enc = (lambda s: None if s is None else s.encode())
        self._check(self.lib.mount(enc(src), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")

    def pdeathsig(self, sig: int) -> None:
        self._check(self.lib.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0), "prctl")


def _unescape_mount(path: str) -> str:
    # /proc/self/mountinfo escapes space, tab, newline and backslash as \ooo octal.
    out, i = [], 0
    while i < len(path):
        if path[i] == "\\" and i + 3 < len(path) and path[i + 1:i + 4].isdigit():
            out.append(chr(int(path[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(path[i])
            i += 1
    return "".join(out)


def _mounts() -> list[tuple[str, int]]:
    """(mount point, per-mount flags to keep) in mount order (parents first)."""
    result = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            fields = line.split()
            flags = 0
            for opt in fields[5].split(","):
                flags |= _OPT_FLAGS.get(opt, 0)
            result.append((_unescape_mount(fields[4]), flags))
    return result


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _expose(libc: _Libc, targets: list[str], report: dict) -> None:
    """Make every target folder reachable by the sandbox uid. A folder on the way that others may
    not traverse (e.g. /root is 0700 while Python lives in /root/.pyenv; pytest's temp folders
    are 0700) is covered, in this mount namespace only, by a tmpfs that holds nothing but bind
    mounts of the entries leading to the targets. Everything else in it stays hidden."""
    ancestors: dict[str, set[str]] = {}
    for target in targets:
        parts = [p for p in target.split("/") if p]
        for depth in range(len(parts)):
            ancestors.setdefault("/" + "/".join(parts[:depth]), set()).add(parts[depth])
    for anc in sorted(ancestors, key=lambda a: (a.count("/") if a != "/" else 0, a)):
        try:
            if os.stat(anc).st_mode & 0o001:
                continue  # traversable by others
        except OSError:
            continue
        fds = {}
        for child in sorted(ancestors[anc]):
            try:
                fds[child] = os.open(os.path.join(anc, child), os.O_PATH)
            except OSError:
                pass
        libc.mount("tmpfs", anc, "tmpfs", _MS_NOSUID | _MS_NODEV, "size=64k,mode=0755")
        for child, fd in fds.items():
            dest = os.path.join(anc, child)
            if os.path.isdir(f"/proc/self/fd/{fd}"):
                os.mkdir(dest)
            else:
                open(dest, "w").close()
            libc.mount(f"/proc/self/fd/{fd}", dest, None, _MS_BIND | _MS_REC, None)
            os.close(fd)
        report.setdefault("rebound", []).append(anc)


def _hide_except(libc: _Libc, path: str, keeps: list[str]) -> None:
    """Cover ``path`` with an empty tmpfs, then bind the ``keeps`` under it back in place (opened
    before the cover, so the originals are reached). Everything else under ``path`` stays hidden."""
    tops = [k for k in keeps if not any(k != o and _under(k, o) for o in keeps)]
    fds = {}
    for k in tops:
        try:
            fds[k] = os.open(k, os.O_PATH)
        except OSError:
            pass
    libc.mount("tmpfs", path, "tmpfs", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, "size=64k,mode=0555")
    for k, fd in fds.items():
        rel = os.path.relpath(k, path)
        os.makedirs(os.path.dirname(os.path.join(path, rel)), mode=0o555, exist_ok=True)
        dest = os.path.join(path, rel)
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            os.makedirs(dest, mode=0o555, exist_ok=True)
        else:
            open(dest, "w").close()
        libc.mount(f"/proc/self/fd/{fd}", dest, None, _MS_BIND | _MS_REC, None)
        os.close(fd)


def _python_roots() -> list[str]:
    roots = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    roots |= {os.path.realpath(p) for p in sys.path if p and os.path.isdir(p)}
    roots.add(os.path.dirname(os.path.realpath(sys.executable)))
    return sorted(roots)


def _kernel_isolate(job: dict, libc: _Libc, report: dict) -> None:
    """Inside the new namespaces, as pid 1: private mounts, then drop to the sandbox uid."""
    workdir, uid, lim = job["workdir"], job["uid"], job["limits"]
    libc.mount("none", "/", None, _MS_REC | _MS_PRIVATE, None)
    libc.mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None)
    libc.mount("tmpfs", workdir, "tmpfs", _MS_NOSUID | _MS_NODEV,
               f"size={int(lim['workdir_bytes'])},mode=0700,uid={uid},gid={uid}")
    keep = [workdir] + _python_roots()
    hidden = []
    for path in job.get("hide_paths", []):
        # Never hide a folder that holds the working directory; one that holds the interpreter (a
        # virtual environment inside the repository) is hidden except for the interpreter's folders.
        if not os.path.isdir(path) or _under(workdir, path):
            continue
        inner = [k for k in keep if _under(k, path)]
        if inner:
            _hide_except(libc, path, inner)
        else:
            libc.mount("tmpfs", path, "tmpfs", _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, "size=4k,mode=0555")
        hidden.append(path)
    report["hidden"] = hidden
    _expose(libc, keep, report)
    failed = []
    for mp, flags in _mounts():
        if mp == workdir or _under(mp, "/proc"):
            continue
        try:
            libc.mount(None, mp, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | flags, None)
        except OSError:
            failed.append(mp)  # typically a mount point now covered by a hiding tmpfs
    report["readonly_failed"] = failed
    os.chdir(workdir)
    _set_limits(lim, nproc=True)
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    report["uid"] = os.getuid()


def _enter_namespaces(job: dict, report: dict) -> _Libc | None:
    """Enter new namespaces and fork; returns in the inner process (pid 1). The outer process
    waits for the inner one and exits with its status. None when namespaces are unavailable."""
    try:
        libc = _Libc()
        libc.unshare(_CLONE_NEWNS | _CLONE_NEWNET | _CLONE_NEWPID | _CLONE_NEWIPC | _CLONE_NEWUTS)
    except OSError as exc:
        report["kernel_error"] = str(exc)
        return None
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
    return libc


def _arm_lifeline(libc: _Libc, fd: int) -> None:
    """Die with the outer process: PDEATHSIG (set after the uid change, which clears it), then make
    sure the outer one had not already gone (its end of the lifeline pipe closes when it does)."""
    import select

    libc.pdeathsig(signal.SIGKILL)
    ready, _, _ = select.select([fd], [], [], 0)
    if ready:
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
_BLOCKED_EVENTS = frozenset({
    "os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn", "os.system", "os.startfile",
    "subprocess.Popen", "pty.spawn", "os.kill", "os.killpg", "signal.pthread_kill",
    "socket.__new__", "socket.bind", "socket.connect", "socket.getaddrinfo", "socket.gethostbyname",
    "socket.gethostbyaddr", "socket.sethostname", "ctypes.dlopen", "ctypes.dlsym", "ctypes.dlsym/handle",
    "ctypes.call_function", "ctypes.cdata", "ctypes.addressof", "os.chroot", "os.setuid",
})
# _posixsubprocess.fork_exec starts processes without an audit event, so the module itself is refused
# (which makes `import subprocess` fail: sandboxed code has no business starting programs).
_BLOCKED_IMPORTS = frozenset({"_posixsubprocess", "_ctypes", "ctypes"})
_PATH_EVENTS = frozenset({"os.remove", "os.rmdir", "os.mkdir", "os.rename", "os.chmod", "os.chown",
                          "os.link", "os.symlink", "os.truncate", "os.utime", "shutil.rmtree", "os.chflags"})
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def _install_guards(workdir: str) -> None:
    """Audit hook refusing what sandboxed code has no business doing. Its state lives in default
    arguments (immutable values) so that it does not depend on module globals."""

    def _inside(path, _wd=os.path.realpath(workdir), _real=os.path.realpath, _fs=os.fsdecode) -> bool:
        if isinstance(path, int):
            return True  # an already open descriptor: it was checked when opened
        p = _real(_fs(path))
        return p == _wd or p.startswith(_wd + "/")

    def hook(event, args, _blocked=_BLOCKED_EVENTS, _imports=_BLOCKED_IMPORTS, _paths=_PATH_EVENTS,
             _wflags=_WRITE_FLAGS, _inside=_inside):
        if event in _blocked:
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "import":
            if args[0] in _imports:
                raise ImportError(f"sandbox: importing {args[0]} is not allowed")
        elif event == "open":
            path, mode, flags = args[0], args[1], args[2]
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or bool(
                isinstance(flags, int) and flags & _wflags)
            if writing and path is not None and not _inside(path):
                raise PermissionError(f"sandbox: writing outside the working directory is not allowed: {path!r}")
        elif event in _paths:
            for a in args[:2]:
                if isinstance(a, (str, bytes, os.PathLike)) and not _inside(a):
                    raise PermissionError(f"sandbox: {event} outside the working directory is not allowed: {a!r}")

    sys.addaudithook(hook)


# --------------------------------------------------------------------------- values
class Unsupported(Exception):
    """A value that is not plain data (its type name is the message)."""


class TooLarge(Exception):
    """A value whose encoding exceeds the size budget."""


_DICT_TYPES_BY_NAME = {("collections", "OrderedDict"), ("collections", "defaultdict"), ("collections", "Counter")}
_BASES = (int, float, complex, str, bytes, bytearray, list, tuple, dict, set, frozenset)


def _key(enc) -> str:
    return dumps(enc)


def encode(x, budget: list[int] | None = None, _depth: int = 0, _stack: set | None = None):
    """Canonical, JSON-ready encoding of plain data as ``[tag, payload...]``.

    Tags: N none, b bool, i int (I: hex for huge), f float (hex, exact), c complex, s str, y bytes
    or bytearray, l list, t tuple, S set/frozenset (sorted), d dict (sorted by key), dt/da/ti/td
    datetime types, D Decimal, F Fraction, nd numpy array, T a class (by qualified name). numpy
    scalars become Python scalars.
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
    if t is bool:
        return ["b", x]
    if t is int:
        return ["i", x] if -(1 << 53) < x < (1 << 53) else ["I", hex(x)]
    if t is float:
        return ["f", x.hex()]
    if t is str:
        return ["s", x]
    if t is complex:
        return ["c", x.real.hex(), x.imag.hex()]
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
                items = [encode(e, budget, _depth + 1, stack) for e in (set.__iter__(x) if t is set else frozenset.__iter__(x))]
                return ["S", sorted(items, key=_key)]
            pairs = [[encode(k, budget, _depth + 1, stack), encode(v, budget, _depth + 1, stack)] for k, v in dict.items(x)]
            return ["d", sorted(pairs, key=lambda kv: _key(kv[0]))]
        finally:
            stack.discard(id(x))
    if isinstance(x, type):
        # A class as a value (``type(v)`` results): equal when module and qualified name are.
        return ["T", f"{type.__getattribute__(x, '__module__')}.{type.__getattribute__(x, '__qualname__')}"]
    mod, name = t.__module__, t.__name__
    if mod == "datetime" and name in ("datetime", "date", "time"):
        return [{"datetime": "dt", "date": "da", "time": "ti"}[name], x.isoformat()]
    if mod == "datetime" and name == "timedelta":
        return ["td", x.days, x.seconds, x.microseconds]
    if mod == "decimal" and name == "Decimal":
        return ["D", str(x)]
    if mod == "fractions" and name == "Fraction":
        return ["F", encode(x.numerator, budget), encode(x.denominator, budget)]
    if mod == "numpy" or mod.startswith("numpy."):
        np = sys.modules.get("numpy")
        if np is not None and t is np.ndarray:
            if x.dtype.kind not in "biufcUS?":
                raise Unsupported(f"numpy.ndarray of dtype {x.dtype}")
            return ["nd", list(x.shape), encode(x.tolist(), budget, _depth + 1, stack)]
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
    t = type(exc)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


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
        module = {"kind": MODULE, "ok": False, "status": "timeout", "error": "Timeout",
                  "message": f"module execution exceeded {lim['module_time']}s"}
    except BaseException as exc:  # SystemExit, SyntaxError, ImportError ... are outcomes
        module = {"kind": MODULE, "ok": False, "status": "raised", "error": _error_name(exc),
                  "message": _short(exc)}
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
            enc = encode(value)
            _timer(0)
            text = dumps(enc)
            if len(text) > value_bytes:
                raise TooLarge(f"encoded value has {len(text)} bytes (limit {value_bytes})")
            rec.update(status="ok", value=enc)
        finally:
            _timer(0)
    except _CallTimeout:
        rec.update(status="timeout", error="Timeout", message=f"call exceeded {budget}s")
    except Unsupported as exc:
        rec.update(status="unsupported", error="Unsupported", message=f"returned a value of type {exc}")
    except TooLarge as exc:
        rec.update(status="too_large", error="TooLarge", message=_short(exc))
    except BaseException as exc:
        try:
            rec.update(status="raised", error=_error_name(exc), message=_short(exc))
        except BaseException:  # a hostile exception whose __str__ raises
            rec.update(status="raised", error=_error_name(exc), message="")
    rec["seconds"] = time.perf_counter() - t0
    return rec


def main() -> None:
    job_fd, result_fd = int(sys.argv[1]), int(sys.argv[2])
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
    report: dict = {"mode": "process", "guards": bool(job["python_guards"])}
    mode = job["isolation"]
    libc = None
    if mode in ("auto", "kernel") and os.geteuid() == 0:
        libc = _enter_namespaces(job, report)
        if libc is not None:
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


if __name__ == "__main__":
    main()
