"""The plug-in worker: a separate Python process that imports plug-in modules and calls their functions.

Started by :mod:`harness.plugins.runtime` as a script (``python -s worker.py <parent pid>``), it
imports nothing of the harness: a plug-in is plain Python (standard library), and this file is its
whole host. One JSON request per line on stdin, one JSON reply per line on the original stdout (the
plug-in's own prints go to /dev/null, so they cannot corrupt the channel):

* ``{"op": "load", "sha": ..., "file": ..., "source": ...}`` -> ``{"ok": true, "overrides": {point:
  {"params": [...], "required": n, "varargs": bool, "line": n}}, "predicates": {...}}``, or
  ``{"ok": false, "error": ..., "line": n}`` (the module raised, or is not a valid plug-in);
* ``{"op": "call", "sha": ..., "kind": "override"|"predicate", "name": ..., "args": [...]}`` ->
  ``{"ok": true, "value": ...}`` or ``{"ok": false, "error": ..., "line": n}``.

A value that is not JSON data (a set, an object) is an error of the call. The caller enforces the
time limits from outside by killing this process (its own session); it dies with its caller
(``PR_SET_PDEATHSIG``) and exits when stdin closes; its address space is capped (2 GiB by default).
"""

import ctypes
import inspect
import json
import os
import signal
import sys
import traceback
import types

MODULES = {}  # sha -> module


def _die_with_parent(parent: int) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(0)


def _line_in(file: str, exc: BaseException):
    """The last line of ``file`` in the traceback of ``exc`` (a syntax error's own line)."""
    if isinstance(exc, SyntaxError) and exc.filename == file:
        return exc.lineno
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename == file:
            line = frame.lineno
    return line


def _error(file: str, exc: BaseException) -> dict:
    text = f"{type(exc).__name__}: {exc}"
    return {"ok": False, "error": text[:1000], "line": _line_in(file, exc)}


def _describe(fn) -> dict:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return {"params": [], "required": 0, "varargs": True, "line": None}
    params, required, varargs = [], 0, False
    for p in sig.parameters.values():
        if p.kind is p.VAR_POSITIONAL:
            varargs = True
        elif p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            params.append(p.name)
            required += p.default is p.empty
        elif p.kind is p.KEYWORD_ONLY and p.default is p.empty:
            required += 1000  # a required keyword-only parameter can never be passed
    code = getattr(fn, "__code__", None)
    return {"params": params, "required": required, "varargs": varargs, "line": getattr(code, "co_firstlineno", None)}


def _table(module, name: str, file: str):
    table = getattr(module, name, None)
    if table is None:
        return {}
    if not isinstance(table, dict):
        raise TypeError(f"{name} must be a dict of names to functions, got {type(table).__name__}")
    for key, fn in table.items():
        if not isinstance(key, str):
            raise TypeError(f"{name} keys must be strings, got {key!r}")
        if not callable(fn):
            raise TypeError(f"{name}[{key!r}] must be a function, got {type(fn).__name__}")
    return table


def load(req: dict) -> dict:
    file, source = req["file"], req["source"]
    module = types.ModuleType("eau_plugin_" + req["sha"][:12])
    module.__file__ = file
    try:
        code = compile(source, file, "exec")
        exec(code, module.__dict__)
        overrides = _table(module, "OVERRIDES", file)
        predicates = _table(module, "PREDICATES", file)
        params = getattr(module, "PREDICATE_PARAMS", None) or {}
        if not isinstance(params, dict):
            raise TypeError("PREDICATE_PARAMS must be a dict of predicate names to {parameter: type name}")
    except BaseException as exc:  # noqa: BLE001 -- anything the module does is the module's error
        return _error(file, exc)
    MODULES[req["sha"]] = module
    preds = {}
    for name, fn in predicates.items():
        d = _describe(fn)
        d["params_spec"] = params.get(name) or {}
        d["doc"] = (fn.__doc__ or "").strip()
        preds[name] = d
    return {"ok": True, "overrides": {k: _describe(f) for k, f in overrides.items()}, "predicates": preds}


def call(req: dict) -> dict:
    module = MODULES.get(req["sha"])
    if module is None:
        return {"ok": False, "error": "plug-in not loaded in this worker", "line": None}
    table = module.OVERRIDES if req["kind"] == "override" else module.PREDICATES
    value = None
    try:
        value = table[req["name"]](*req["args"])
        json.dumps(value)
    except BaseException as exc:  # noqa: BLE001
        if isinstance(exc, TypeError) and "JSON serializable" in str(exc):
            return {"ok": False, "error": f"returned {type(value).__name__}, which is not plain data", "line": None}
        return _error(module.__file__, exc)
    return {"ok": True, "value": value}


def _limit_memory(mib: int) -> None:
    """A plug-in that allocates without bound gets MemoryError, not the machine's memory."""
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (mib << 20, mib << 20))
    except (ImportError, ValueError, OSError):
        pass


def main() -> None:
    _die_with_parent(int(sys.argv[1]))
    _limit_memory(int(sys.argv[2]) if len(sys.argv) > 2 else 2048)
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    sys.stdout = open(os.devnull, "w")
    for line in sys.stdin:
        try:
            req = json.loads(line)
            reply = load(req) if req.get("op") == "load" else call(req)
        except Exception as exc:  # noqa: BLE001 -- a malformed request
            reply = {"ok": False, "error": f"worker: {type(exc).__name__}: {exc}", "line": None}
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
