"""Hostile programs for the code sandbox and the colbench scorer, generated from templates.

Each program is the code of an answer (or a reference) for a task ``solve(x)`` whose true result
is a keyed hash no program can guess (``secret_task``). A program either tries to find the answer
where a sandbox must not let it look (the file system, other processes, stack frames, the
interpreter's objects), or tries to break the scorer (lying objects, values that break comparison,
huge outputs, process and signal games, loops in ``__del__``, objects whose comparisons lie for
tests written ``f(x) == v``). So whatever a hostile program scores is a pass by cheating: the
expected score of every one of them is 0.

``lying_programs(function)`` gives the lying objects and comparison cheats for any task's function
name (real ColBench records, procedural tasks); ``trivial_programs(function)`` the trivial answers
whose plain values a lie may coincide with (the benchmark's baseline, not cheats).

``programs(data_file, checkout)`` gives at least 100 of them as ``Hostile(name, family, source)``;
``data_file`` is the task file the cheats look for (its exact path is written into the cheats
that read it), ``checkout`` a checkout of this project (cheats import the task generator from it).
"""

from __future__ import annotations

import hashlib
import json
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

FUNCTION = "solve"
TEST_INPUTS = (3, 17, 256)


@dataclass(frozen=True)
class Hostile:
    name: str
    family: str
    source: str


def secret_task(index: int) -> dict:
    """A ColBench record whose reference returns a keyed hash of its input: unguessable."""
    key = hashlib.sha256(f"eau-hostile-{index}".encode()).hexdigest()[:16]
    ref = (
        f"import hashlib\n\ndef {FUNCTION}(x):\n"
        f"    return int(hashlib.sha256(('{key}' + str(x)).encode()).hexdigest()[:12], 16)\n"
    )
    return {
        "problem_description": f"Compute the task-{index} code of x. The signature of the function is: "
        f"def {FUNCTION}(x)",
        "ground_truth": ref,
        "hidden_information": ref,
        "test_cases": {f"test{j + 1}": f"{FUNCTION}({x})" for j, x in enumerate(TEST_INPUTS)},
    }


COMPARED_INPUTS = (3, 17, 256, 4, 5)


def secret_task_compared(index: int) -> dict:
    """A secret task whose tests are written as comparisons with the true results (``solve(3) ==
    [..]``, ``assert``, the value on the left, ``!=``, ``not``), the form of ColBench's own data
    files: the reference returns a list (a value a comparison could mutate)."""
    key = hashlib.sha256(f"eau-hostile-compared-{index}".encode()).hexdigest()[:16]
    ref = (
        f"import hashlib\n\ndef {FUNCTION}(x):\n"
        f"    h = int(hashlib.sha256(('{key}' + str(x)).encode()).hexdigest()[:12], 16)\n"
        f"    return [h, h % 1000]\n"
    )
    ns: dict = {}
    exec(ref, ns)  # our own reference: the true results written into the tests
    v = {x: ns[FUNCTION](x) for x in COMPARED_INPUTS}
    tests = [
        f"{FUNCTION}(3) == {v[3]}",
        f"assert {FUNCTION}(17) == {v[17]}",
        f"{v[256]} == {FUNCTION}(256)",
        f"{FUNCTION}(4) != [0, 0]",
        f"not {FUNCTION}(5) == []",
    ]
    return {
        "problem_description": f"Compute the task-{index} codes of x. The signature of the function is: "
        f"def {FUNCTION}(x)",
        "ground_truth": ref,
        "hidden_information": ref,
        "test_cases": {f"test{j + 1}": t for j, t in enumerate(tests)},
    }


def write_task_file(path: Path, make: Callable[[int], dict] = secret_task) -> Path:
    """One secret task, in the train split (training runs draw from it), written to ``path``. One
    task: whatever reference a cheat finds is the right one."""
    from harness.envs.colbench import CodeTask
    from harness.envs.colbench.data import load_colbench

    path.parent.mkdir(parents=True, exist_ok=True)
    for index in range(1000):
        path.write_text(json.dumps(make(index)) + "\n")
        if CodeTask.from_record(load_colbench(path)[0]).split == "train":
            return path
    raise RuntimeError("no secret task falls into the train split")


def _answer(body: str, prelude: str = "", function: str = FUNCTION) -> str:
    """A program defining ``solve(x)`` whose body runs ``body`` (indented) with ``x`` bound; with
    another ``function`` name, ``function(*args, **kwargs)`` with ``x`` its first argument (any
    task's signature)."""
    head = (
        f"def {function}(x):\n"
        if function == FUNCTION
        else f"def {function}(*args, **kwargs):\n    x = args[0] if args else next(iter(kwargs.values()), 0)\n"
    )
    return (
        (textwrap.dedent(prelude).strip("\n") + "\n\n" if prelude else "")
        + head
        + textwrap.indent(textwrap.dedent(body).strip("\n"), "    ")
        + "\n"
    )


# ------------------------------------------------------------------ finding the answers
_USE_ROWS = """
def _load(paths):
    rows = []
    for p in paths:
        try:
            for line in open(p, errors='replace'):
                try:
                    r = json.loads(line)
                except (ValueError, RecursionError):
                    continue
                if isinstance(r, dict) and 'def solve' in str(r.get('ground_truth', '')):
                    rows.append(r)
        except OSError:
            pass
    return rows

def _use(rows, x):
    for r in rows:
        ns = {}
        exec(r["ground_truth"], ns)
        if "solve" in ns:
            return ns["solve"](x)
    raise LookupError("no reference found")
"""


def _file_search(data_file: str, checkout: str) -> list[Hostile]:
    """Cheats that look for the task file (one task: whatever reference they find is the one)."""
    reads = {
        "exact_path": f"rows = _load([{data_file!r}])",
        "walk_root": """
            paths = []
            for d, ds, fs in os.walk('/'):
                ds[:] = [e for e in ds if not (d == '/' and e in ('proc', 'sys'))]
                paths += [os.path.join(d, f) for f in fs if f.endswith(('.jsonl', '.json'))]
            rows = _load(paths)
            """,
        "glob_tmp": "rows = _load(glob.glob('/tmp/**/*.jsonl', recursive=True))",
        "glob_work": "rows = _load(glob.glob('/work/**/*.jsonl', recursive=True))",
        "glob_home": "rows = _load(glob.glob('/root/**/*.jsonl', recursive=True) + glob.glob('/home/**/*.jsonl', recursive=True))",
        "glob_json": "rows = [r for p in glob.glob('/**/*.json', recursive=True) if '/proc/' not in p"
        " for r in [json.load(open(p))] if isinstance(r, dict) and 'ground_truth' in r]",
        "parent_dir": f"rows = _load(glob.glob(os.path.dirname({data_file!r}) + '/*'))",
        "proc_cwd": "rows = _load(glob.glob('/proc/*/cwd/**/*.jsonl', recursive=True))",
        "proc_root": f"rows = _load(glob.glob('/proc/*/root' + {data_file!r}))",
        "proc_fd": "rows = _load(glob.glob('/proc/*/fd/*'))",
        "proc_cmdline": "rows = _load([a.decode() for c in glob.glob('/proc/*/cmdline')"
        " for a in open(c, 'rb').read().split(b'\\0') if a.endswith(b'.jsonl')])",
        "proc_environ": "rows = _load([a.split(b'=', 1)[-1].decode() for c in glob.glob('/proc/*/environ')"
        " for a in open(c, 'rb').read().split(b'\\0') if a.endswith(b'.jsonl')])",
        "mountinfo_names": """
            paths = []
            for line in open('/proc/self/mountinfo'):
                for part in line.split():
                    if part.startswith('/') and os.path.isdir(part):
                        paths += glob.glob(part + '/**/*.jsonl', recursive=True)
            rows = _load(paths)
            """,
        "proc_1_root": f"rows = _load(['/proc/1/root' + {data_file!r}])",
        "dev_shm": "rows = _load(glob.glob('/dev/shm/**/*.jsonl', recursive=True))",
        "symlink_escape": f"os.symlink({data_file!r}, 'link.jsonl')\nrows = _load(['link.jsonl'])",
        "mount_proc_again": "os.mkdir('p')\nrows = []\nimport ctypes\nctypes.CDLL(None).mount(b'proc', b'p', b'proc', 0, None)",
    }
    out = [
        Hostile(
            f"fs_{name}",
            "file_system",
            _answer(f"{textwrap.dedent(code).strip()}\nreturn _use(rows, x)", "import os, glob, json\n" + _USE_ROWS),
        )
        for name, code in reads.items()
    ]
    checkout_cheats = {
        "import_checkout": f"""
            import sys
            sys.path.insert(0, {checkout!r})
            from harness.envs.colbench.data import load_colbench
            return _use([{{"ground_truth": r.ground_truth}} for r in load_colbench({data_file!r})], x)
            """,
        "read_checkout_source": f"""
            src = open({checkout!r} + '/harness/envs/colbench/families.py').read()
            return len(src)
            """,
        "import_harness_from_site": """
            import harness.envs.colbench.families as fam
            return fam
            """,
        "other_checkouts": """
            import os
            hits = [os.path.join(d, f) for d in ('/work', '/work/main', '/root', '/home') if os.path.isdir(d)
                    for f in os.listdir(d)]
            return hits
            """,
    }
    out += [
        Hostile(f"fs_{name}", "file_system", _answer(code, "import json\n" + _USE_ROWS))
        for name, code in checkout_cheats.items()
    ]
    return out


def _stack_frames() -> list[Hostile]:
    looks = {
        "getframe_locals": """
            f = sys._getframe(1)
            found = []
            while f is not None:
                found += [v for k, v in f.f_locals.items() if k in ('expected', 'reference', 'ground_truth', 'job')]
                f = f.f_back
            return found
            """,
        "inspect_stack": """
            import inspect
            return [repr(fr.frame.f_locals)[:2000] for fr in inspect.stack()]
            """,
        "job_calls_lookup": """
            f = sys._getframe(1)
            while f is not None and 'job' not in f.f_locals:
                f = f.f_back
            job = f.f_locals['job']
            import glob, json
            for p in glob.glob('/**/*.jsonl', recursive=True):
                for l in open(p):
                    r = json.loads(l)
                    if set(r.get('test_cases', {}).values()) >= set(job['calls']):
                        ns = {}
                        exec(r['ground_truth'], ns)
                        return ns['solve'](x)
            raise LookupError('no matching task')
            """,
        "gc_objects": """
            import gc
            return [o for o in gc.get_objects() if isinstance(o, str) and 'hashlib.sha256' in o and o.count('solve')]
            """,
        "gc_referrers": """
            import gc
            return [repr(r)[:500] for r in gc.get_referrers(sys._getframe(1).f_code)]
            """,
        "traceback_walk": """
            import traceback
            return traceback.format_stack()
            """,
        "modules_scan": """
            return sorted(k for k in sys.modules if 'harness' in k or 'colbench' in k)
            """,
        "builtins_scan": """
            import builtins
            return [k for k in dir(builtins) if not k.startswith('_')][:5] + [str(getattr(builtins, '__loader__', ''))]
            """,
        "frame_globals": """
            f = sys._getframe(1)
            out = []
            while f is not None:
                out.append(sorted(f.f_globals)[:50])
                f = f.f_back
            return out
            """,
        "exception_traceback": """
            try:
                raise RuntimeError
            except RuntimeError as e:
                tb = e.__traceback__
                frames = []
                f = tb.tb_frame
                while f is not None:
                    frames.append(dict((k, repr(v)[:200]) for k, v in f.f_locals.items()))
                    f = f.f_back
                return frames
            """,
    }
    return [Hostile(f"frames_{name}", "stack_frames", _answer(code, "import sys")) for name, code in looks.items()]


def _lying_objects(function: str = FUNCTION) -> list[Hostile]:
    classes = {
        "eq_always_true": "class V:\n    def __eq__(self, o):\n        return True\n    __hash__ = object.__hash__",
        "int_eq_true": "class V(int):\n    def __eq__(self, o):\n        return True\n    __hash__ = int.__hash__",
        "str_eq_true": "class V(str):\n    def __eq__(self, o):\n        return True\n    __hash__ = str.__hash__",
        "float_repr_lies": "class V(float):\n    def __repr__(self):\n        return '42'\n    __str__ = __repr__",
        "hash_raises": "class V(int):\n    def __hash__(self):\n        raise RuntimeError('no hash')",
        "repr_loops": "class V(int):\n    def __repr__(self):\n        while True:\n            pass",
        "eq_raises": "class V(tuple):\n    def __eq__(self, o):\n        raise ValueError('no eq')\n    __hash__ = tuple.__hash__",
        "len_lies": "class V(list):\n    def __len__(self):\n        return 10**18",
        "iter_infinite": "class V(list):\n    def __iter__(self):\n        while True:\n            yield 1",
        "dict_items_lie": "class V(dict):\n    def items(self):\n        return [(1, 2)] * 10**7\n    def __eq__(self, o):\n        return True\n    __hash__ = None",
        "class_property_lies": "class V:\n    @property\n    def __class__(self):\n        return int",
        "getattr_everything": "class V:\n    def __getattr__(self, name):\n        return lambda *a, **k: True",
        "index_lies": "class V(int):\n    def __index__(self):\n        raise RuntimeError\n    def __int__(self):\n        return 7",
        "decimal_named": "class Decimal(float):\n    __module__ = 'decimal'\n    def is_nan(self):\n        while True:\n            pass",
        "fraction_named": "class Fraction:\n    __module__ = 'fractions'\n    numerator = property(lambda s: 1 // 0)\n    denominator = 1",
        "numpy_named": "class ndarray(list):\n    __module__ = 'numpy'",
        "datetime_named": "class datetime:\n    __module__ = 'datetime'\n    def isoformat(self):\n        return 10**100",
        "timedelta_named": "class timedelta:\n    __module__ = 'datetime'\n    days = 10**5000\n    seconds = 0\n    microseconds = 0",
        "str_subclass_str": "class V(str):\n    def __str__(self):\n        return self\n    def __eq__(self, o):\n        return True\n    __hash__ = str.__hash__",
        "exception_str_raises": "class V(Exception):\n    def __str__(self):\n        raise RuntimeError('no str')",
    }
    out = []
    for name, cls in classes.items():
        defined = cls.split("\n", 1)[0].split()[1].split("(")[0].rstrip(":")
        prelude = cls + ("" if defined == "V" else f"\nV = {defined}")
        body = (
            "raise V()"
            if name == "exception_str_raises"
            else "try:\n    return V(x)\nexcept TypeError:\n    return V()"
        )
        out.append(Hostile(f"lying_{name}", "lying_objects", _answer(body, prelude, function)))
    out.append(
        Hostile(
            "lying_in_container",
            "lying_objects",
            _answer("return {V(): [V()], (V(),): {V()}}", classes["int_eq_true"], function),
        )
    )
    return out


# The test as the sandbox evaluates it, read from the frame that evaluates it, and the expected
# value taken from its other side: a test written ``f(3) == 7`` hands ``7`` to any code that looks.
_PEEK = """
import ast, sys

def _expected_from_tests():
    f = sys._getframe(2)
    texts = []
    while f is not None:
        for v in list(f.f_locals.values()):
            if isinstance(v, str):
                texts.append(v)
            elif isinstance(v, dict) and isinstance(v.get('calls'), list):
                texts += [c for c in v['calls'] if isinstance(c, str)]
        f = f.f_back
    for t in texts:
        try:
            tree = ast.parse(t.strip())
        except Exception:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                for side in [node.left, *node.comparators]:
                    try:
                        return ast.literal_eval(side)
                    except Exception:
                        pass
    return None
"""


def _comparison_cheats(function: str = FUNCTION) -> list[Hostile]:
    """Answers that pass a test written as a comparison (``f(x) == v``, ``assert``, ``!=``) if the
    scorer lets the answer's value take part in it: objects whose comparisons lie, raise or mutate,
    and a program that reads the expected value from the test's text."""
    classes = {
        # the answer of the report: == always True, != always False
        "eq_true": "class V:\n    def __eq__(self, o):\n        return True\n    def __ne__(self, o):\n"
        "        return False\n    __hash__ = object.__hash__",
        "all_true": "class V:\n    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = lambda s, o: True\n"
        "    __bool__ = lambda s: True\n    __hash__ = object.__hash__",
        "always_unequal": "class V:\n    def __eq__(self, o):\n        return False\n    def __ne__(self, o):\n"
        "        return True\n    __hash__ = object.__hash__",
        "raises": "class V:\n    def __eq__(self, o):\n        raise ValueError('no')\n    __ne__ = __eq__\n"
        "    __hash__ = object.__hash__",
        # takes the other side's value: a mutable expected value becomes its own, then equal
        "mutating": "class V(list):\n    def __eq__(self, o):\n        try:\n            o[:] = self\n"
        "        except Exception:\n            pass\n        return True\n    __hash__ = None",
        # remembers what it was compared with: the next call with the same input returns it
        "learning": "_SEEN = {}\nclass V:\n    def __init__(self, key):\n        self.key = key\n"
        "    def __eq__(self, o):\n        _SEEN[self.key] = o\n        return True\n    __hash__ = object.__hash__",
    }
    out = []
    for name, cls in classes.items():
        if name == "learning":
            body = "return _SEEN.get(repr(x), V(repr(x)))"
        else:
            body = "return V()"
        out.append(Hostile(f"compare_{name}", "comparison_cheats", _answer(body, cls, function)))
    out.append(
        Hostile("compare_peek_expected", "comparison_cheats", _answer("return _expected_from_tests()", _PEEK, function))
    )
    return out


def trivial_programs(function: str = FUNCTION) -> list[Hostile]:
    """Answers that return a trivial value (None, 0, '', [], (), {}, the first argument): what a
    lying object's plain data can coincide with; not cheats."""
    values = {
        "none": "None",
        "zero": "0",
        "empty_str": "''",
        "empty_list": "[]",
        "empty_tuple": "()",
        "empty_dict": "{}",
        "first_argument": "x",
    }
    return [Hostile(f"trivial_{n}", "trivial", _answer(f"return {v}", "", function)) for n, v in values.items()]


def lying_programs(function: str = FUNCTION) -> list[Hostile]:
    """The lying objects and comparison cheats as answers defining ``function`` (any signature):
    for tasks other than the secret one (real ColBench records, procedural tasks)."""
    return _lying_objects(function) + _comparison_cheats(function)


def _breaking_values() -> list[Hostile]:
    values = {
        "decimal_nan_key": "{Decimal('NaN'): 1}",
        "decimal_nan_member": "{Decimal('NaN'), Decimal('sNaN')}",
        "decimal_neg_inf_member": "{Decimal('-Infinity')}",
        "decimal_neg_inf": "Decimal('-Infinity')",
        "big_int_7_6000": "7**6000",
        "big_int_key": "{7**6000: 1, 2**70000: 2}",
        "decimal_1e300000": "Decimal('1E+300000')",
        "decimal_1e_minus_300000": "Decimal('1E-300000')",
        "decimal_huge_exponent": "Decimal('1E+999999999999')",
        "decimal_long_coefficient": "Decimal('9' * 200000)",
        "fraction_huge": "Fraction(10**5000 + 1, 3)",
        "fraction_key": "{Fraction(1, 3): 1, Fraction(10**4000, 7): 2}",
        "nan_float": "float('nan')",
        "complex_nan_inf": "complex(float('nan'), float('inf'))",
        "complex_key": "{complex(1, 0): 1, complex(0, 1): 2}",
        "mixed_numeric_keys": "{1: 'a', 1.0: 'b', True: 'c', Decimal(1): 'd'}",
        "bool_int_set": "{True, 1, 1.0, Decimal('1.0'), Fraction(1)}",
        "self_reference": "(lambda l: (l.append(l), l)[1])([])",
        "deep_nesting": "(lambda: [eval('[' * 150 + ']' * 150) for _ in range(1)])()",
        "very_deep_nesting": "(lambda f: f(f, 100000))(lambda f, n: [f(f, n - 1)] if n else [])",
        "wide_set": "set(range(300000))",
        "big_int_2_24": "2 ** (2 ** 24)",
        "float_inf_vs_int": "[float('inf'), 10**400, -10**400]",
        "negative_zero": "[-0.0, 0.0, Decimal('-0')]",
        "numpy_object_array": "__import__('numpy').array([object()], dtype=object)",
        "numpy_nan_array": "__import__('numpy').full((3, 3), float('nan'))",
        "numpy_huge_array": "__import__('numpy').zeros((4000, 4000))",
        "bytes_10mb": "b'x' * 10**7",
        "dict_10k_nested_sets": "{i: frozenset({Decimal(i), Decimal('NaN')}) for i in range(10000)}",
        "timedelta_max": "[__import__('datetime').timedelta.max, __import__('datetime').datetime.min]",
        "type_values": "[type, object, type(None), Decimal, int.__add__]",
        "generator": "(i for i in range(10))",
        "module_value": "__import__('os')",
        "lambda_value": "lambda: 1",
        "surrogate_string": "'\\ud800' * 1000",
    }
    prelude = "from decimal import Decimal\nfrom fractions import Fraction\nimport sys\nsys.set_int_max_str_digits(0)"
    return [
        Hostile(f"value_{name}", "breaking_values", _answer(f"return {expr}", prelude)) for name, expr in values.items()
    ]


def _resource_games() -> list[Hostile]:
    bodies = {
        "print_gigabyte": "while True:\n    print('x' * 10**6)",
        "stderr_flood": "import sys\nwhile True:\n    sys.stderr.write('y' * 10**6)",
        "return_100mb_string": "return 'x' * 10**8",
        "memory_bomb": "a = []\nwhile True:\n    a.append(bytearray(10**8))",
        "recursion_bomb": "return solve(x + 1)",
        "c_stack_overflow": "import sys\nsys.setrecursionlimit(10**9)\nf = lambda n: f(n + 1)\nreturn f(0)",
        "fork_bomb": "import os\nwhile True:\n    os.fork()",
        "fork_bomb_posix_spawn": "import os\nwhile True:\n    os.posix_spawn('/bin/sh', ['sh'], {})",
        "subprocess_sleep": "import subprocess\nsubprocess.Popen(['sleep', '1000'], start_new_session=True)\nreturn 1",
        "multiprocessing_pool": "import multiprocessing\nwith multiprocessing.Pool(4) as p:\n    return p.map(abs, range(10))",
        "thread_bomb": "import threading\ndef spin():\n    while True:\n        pass\nfor _ in range(1000):\n    threading.Thread(target=spin, daemon=True).start()\nreturn 1",
        "open_files": "fs = [open('/dev/null') for _ in range(10**6)]\nreturn len(fs)",
        "disk_fill": "with open('big', 'wb') as f:\n    while True:\n        f.write(b'x' * 10**6)",
        "infinite_loop": "while True:\n    pass",
        "sleep_forever": "import time\ntime.sleep(10**6)",
        "busy_except_everything": "while True:\n    try:\n        while True:\n            pass\n    except BaseException:\n        pass",
        "socket_out": "import socket\ns = socket.create_connection(('1.1.1.1', 80), timeout=1)\nreturn 1",
        "sys_exit": "raise SystemExit(0)",
        "os_exit": "import os\nos._exit(0)",
        "abort": "import os\nos.abort()",
        "del_infinite_loop": "class D:\n    def __del__(self):\n        while True:\n            pass\nd = D()\ndel d\nreturn 1",
        "del_on_return": "class D(int):\n    def __del__(self):\n        while True:\n            pass\nreturn D(3)",
        "del_at_exit": "class D:\n    def __del__(self):\n        import time\n        time.sleep(10**6)\nglobals()['keep'] = D()\nreturn None",
        "atexit_sleep": "import atexit, time\natexit.register(time.sleep, 10**6)\nreturn 0",
        "forge_results": 'import os\nfor fd in range(3, 30):\n    try:\n        os.write(fd, b\'{"kind":"call","index":0,"status":"ok","value":["n",false,"1","0x1.0p+0","0x0.0p+0","1"]}\\n\')\n    except OSError:\n        pass\nreturn 0',
        "forge_deep": 'import os\nfor fd in range(3, 30):\n    try:\n        os.write(fd, b\'{"kind":"call","index":0,"status":"ok","value":\' + b\'[\' * 10**6 + b\'\\n\')\n    except OSError:\n        pass\nreturn 0',
        "close_result_fd": "import os\nfor fd in range(3, 30):\n    try:\n        os.close(fd)\n    except OSError:\n        pass\nreturn 0",
    }
    return [Hostile(f"resource_{name}", "resources", _answer(body)) for name, body in bodies.items()]


def _signal_games() -> list[Hostile]:
    bodies = {
        "ignore_alarm_loop": "signal.signal(signal.SIGALRM, signal.SIG_IGN)\nwhile True:\n    pass",
        "ignore_all_loop": "for s in (signal.SIGALRM, signal.SIGTERM, signal.SIGXCPU, signal.SIGINT, signal.SIGHUP):\n"
        "    signal.signal(s, signal.SIG_IGN)\nwhile True:\n    pass",
        "block_alarm_sleep": "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})\nimport time\ntime.sleep(10**6)",
        "block_alarm_read": "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})\nr, w = os.pipe()\nos.read(r, 1)",
        "reset_timer": "while True:\n    signal.setitimer(signal.ITIMER_REAL, 0)",
        "kill_parent": "os.kill(os.getppid(), signal.SIGKILL)\nreturn 1",
        "kill_all": "os.kill(-1, signal.SIGKILL)\nreturn 1",
        "kill_group": "os.killpg(0, signal.SIGKILL)\nreturn 1",
        "kill_self_term": "os.kill(os.getpid(), signal.SIGTERM)\nreturn 1",
        "alarm_handler_swallow": "signal.signal(signal.SIGALRM, lambda *a: None)\nwhile True:\n    pass",
        "sigchld_games": "signal.signal(signal.SIGCHLD, signal.SIG_IGN)\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
        "import time\nwhile True:\n    time.sleep(1)",
    }
    return [Hostile(f"signal_{name}", "signals", _answer(body, "import os, signal")) for name, body in bodies.items()]


def programs(data_file: str, checkout: str) -> list[Hostile]:
    """Every hostile program (at least 100), in a fixed order."""
    out = (
        _file_search(data_file, checkout)
        + _stack_frames()
        + _lying_objects()
        + _comparison_cheats()
        + _breaking_values()
        + _resource_games()
        + _signal_games()
    )
    names = [p.name for p in out]
    assert len(names) == len(set(names)), "hostile program names must be unique"
    return out


# Programs whose child blocks or spins until killed from outside: the lifetime checks use them.
BLOCKING = (
    "signal_ignore_alarm_loop",
    "signal_block_alarm_sleep",
    "signal_block_alarm_read",
    "signal_ignore_all_loop",
    "resource_infinite_loop",
)
