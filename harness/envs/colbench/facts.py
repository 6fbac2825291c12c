"""Facts a collaborator knows about a reference function, extracted with ``ast``.

Kinds (the ``reveal_kinds`` knob filters them):

* ``signature`` — the function's name, parameters and defaults (and modules it relies on);
* ``shape`` — per parameter, what the input looks like, from annotations and usage: indexed by
  position, iterated, ``.keys()``/``.get('k')``/``x['k']`` (a dict and its keys), string methods,
  arithmetic (a number), elements unpacked into pairs or read by key;
* ``return`` — what comes back: type and form (rounded to n places, a dict with keys, a tuple of n
  values, a sorted list, True/False, ...);
* ``edge_case`` — branches on empty input, None, zero, negative values, type checks, and raised
  exceptions, with what the function does then;
* ``constant`` — literal constants that matter: thresholds in comparisons, rates and offsets in
  arithmetic, named constants, lookup tables, magic strings.

Each fact's text is a short sentence a developer would say, never the code: comparisons are put in
words, long literals are cut, and no text shares a verbatim span of ``MAX_SPAN`` (40) characters
with the reference (such a fact is dropped). Keywords are the words a question about the fact is
likely to use (``harness.users.matching``).
"""

from __future__ import annotations

import ast
import re
import warnings
from dataclasses import dataclass, field
from typing import Iterable

from harness.types import Fact

KINDS = ("signature", "shape", "return", "edge_case", "constant")
MAX_SPAN = 40  # no fact text may contain this many consecutive characters of the reference
MAX_LITERAL_TOKENS = 7  # longer string literals are cut (8 tokens is the leak guard's span)
PER_KIND = {"signature": 1, "shape": 4, "return": 1, "edge_case": 4, "constant": 5}
_TOKEN_RE = re.compile(r"\w+|[^\w\s]")
_SIG_RE = re.compile(r"def\s+([A-Za-z_]\w*)\s*\(([^)]*)\)")
_SPLIT_RE = re.compile(r"[A-Za-z][a-z]*|[0-9]+")
TRIVIAL_NUMBERS = {0, 1, -1, 2}

DICT_METHODS = {"keys", "values", "items", "get", "setdefault", "update", "popitem"}
LIST_METHODS = {"append", "extend", "insert", "sort", "remove", "reverse"}
STR_METHODS = {
    "lower",
    "upper",
    "split",
    "strip",
    "lstrip",
    "rstrip",
    "startswith",
    "endswith",
    "replace",
    "isdigit",
    "isalpha",
    "isalnum",
    "title",
    "capitalize",
    "find",
    "splitlines",
    "encode",
    "casefold",
    "isupper",
    "islower",
    "isspace",
    "format",
    "zfill",
    "partition",
}
_OP_WORDS = {
    ast.Lt: "is below",
    ast.LtE: "is at most",
    ast.Gt: "is above",
    ast.GtE: "is at least",
    ast.Eq: "is",
    ast.NotEq: "is not",
    ast.In: "is one of",
    ast.NotIn: "is not one of",
    ast.Is: "is",
    ast.IsNot: "is not",
}
_ARITH_WORDS = {
    ast.Mult: "multiplied by",
    ast.Div: "divided by",
    ast.Add: "plus",
    ast.Sub: "minus",
    ast.Pow: "raised to the power",
    ast.FloorDiv: "integer-divided by",
    ast.Mod: "modulo",
}


# --------------------------------------------------------------------------- small helpers
def words_of(name: str) -> list[str]:
    """Identifier parts in lower case: ``maxLen_2`` -> ``['max', 'len', '2']``."""
    return [w.lower() for w in _SPLIT_RE.findall(name)]


def _join(items: list[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _cap(text: str) -> str:
    """Sentence case, except that an identifier keeps its spelling (``average_age`` stays)."""
    first = text.split(" ", 1)[0]
    return (
        text if ("_" in first or any(c.isupper() for c in first) or not first.isalpha()) else text[0].upper() + text[1:]
    )


def literal(value: object) -> str:
    """A short rendering of a literal; long strings are cut to their first words."""
    if isinstance(value, str):
        if len(_TOKEN_RE.findall(value)) <= MAX_LITERAL_TOKENS and len(value) < 30:
            return repr(value)
        head = " ".join(value.split()[:3])[:24]
        return f"a message beginning with {head!r}…"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (int, bool)) or value is None:
        return repr(value)
    return "a fixed value"


def shares_span(text: str, reference: str, n: int = MAX_SPAN) -> bool:
    """Whether ``text`` contains ``n`` consecutive characters that also occur in ``reference``
    (also after collapsing whitespace)."""
    if len(text) < n:
        return False
    ref_forms = {reference, " ".join(reference.split())}
    for t in {text, " ".join(text.split())}:
        windows = {t[i : i + n] for i in range(len(t) - n + 1)}
        for ref in ref_forms:
            if any(w in ref for w in windows):
                return True
    return False


def _const(node: ast.AST) -> object:
    """The value of a constant node (negative numbers included), else a sentinel."""
    if isinstance(node, ast.Constant):
        return node.value
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
        and isinstance(node.operand.value, (int, float))
    ):
        return -node.operand.value
    return _NOTHING


_NOTHING = object()
_FOLD_OPS = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b if b else _NOTHING,
}


def fold(node: ast.AST) -> object:
    """The value of a numeric expression made of constants only (``1 - 0.2`` -> 0.8), else a sentinel."""
    v = _const(node)
    if v is not _NOTHING:
        return v
    if isinstance(node, ast.BinOp) and type(node.op) in _FOLD_OPS:
        a, b = fold(node.left), fold(node.right)
        if _is_num(a) and _is_num(b):
            out = _FOLD_OPS[type(node.op)](a, b)
            return round(out, 10) if isinstance(out, float) else out
    return _NOTHING


def _is_num(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _own_nodes(func: ast.AST) -> Iterable[ast.AST]:
    """Nodes of ``func``'s body, not descending into nested functions, lambdas or classes."""
    stack = list(ast.iter_child_nodes(func))
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        stack.extend(ast.iter_child_nodes(node))


def _in_order(nodes: Iterable[ast.AST]) -> list[ast.AST]:
    return sorted(nodes, key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0)))


@dataclass
class _Draft:
    kind: str
    key: str
    text: str
    keywords: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- the analysis
class _Analysis:
    def __init__(self, tree: ast.Module, func: ast.FunctionDef | ast.AsyncFunctionDef, source: str):
        self.tree, self.func, self.source = tree, func, source
        a = func.args
        self.params = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)] + [
            x.arg for x in (a.vararg, a.kwarg) if x is not None
        ]
        self.params = [p for p in self.params if p not in ("self", "cls")]
        self.nodes = _in_order(_own_nodes(func))
        self.assigned: dict[str, list[ast.AST]] = {}
        for n in self.nodes:
            if isinstance(n, ast.Assign):
                for t in n.targets:
                    if isinstance(t, ast.Name):
                        self.assigned.setdefault(t.id, []).append(n.value)

    # ---------------------------------------------------------------- rendering
    def side(self, node: ast.AST) -> str | None:
        v = fold(node)
        if v is not _NOTHING:
            return literal(v)
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len" and node.args:
            inner = self.side(node.args[0])
            return f"the length of {inner}" if inner else None
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            vals = [_const(e) for e in node.elts]
            if vals and all(v is not _NOTHING for v in vals) and len(vals) <= 6:
                return _join([literal(v) for v in vals])
            return None
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
            key = _const(node.slice)
            if isinstance(key, str):
                return f"the {key!r} entry of {node.value.id}"
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            return f"{node.value.id}.{node.attr}"
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and isinstance(node.func.value, ast.Name)
            and node.args
        ):
            key = self.side(node.args[0])
            return f"the {key} entry of {node.func.value.id}" if key else None
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and isinstance(node.slice, ast.Name):
            return f"the {node.slice.id} entry of {node.value.id}"
        text = ast.unparse(node)
        return text if len(text) <= 24 else None

    def cond_words(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.BoolOp):
            parts = [self.cond_words(v) for v in node.values[:4]]
            if None in parts or len(node.values) > 4:
                return None
            # "; " between the parts: the code's "a and b" never appears verbatim.
            return ("all of: " if isinstance(node.op, ast.And) else "any of: ") + "; ".join(parts)  # type: ignore[arg-type]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            if isinstance(node.operand, ast.Name):
                return f"{node.operand.id} is empty (or zero/None)"
            inner = self.cond_words(node.operand)
            return f"it is not the case that {inner}" if inner else None
        if isinstance(node, ast.Name):
            return f"{node.id} is set (truthy)"
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "isinstance"
            and len(node.args) == 2
        ):
            what = self.side(node.args[0])
            t = ast.unparse(node.args[1])
            return f"{what} is of type {t}" if what and len(t) <= 30 else None
        if isinstance(node, ast.Compare):
            if len(node.ops) == 2 and all(isinstance(o, (ast.Lt, ast.LtE)) for o in node.ops):
                lo, mid, hi = self.side(node.left), self.side(node.comparators[0]), self.side(node.comparators[1])
                if lo and mid and hi:
                    return f"{mid} is between {lo} and {hi}"
            if len(node.ops) != 1:
                return None
            left, right = self.side(node.left), self.side(node.comparators[0])
            op = _OP_WORDS.get(type(node.ops[0]))
            if (
                isinstance(node.ops[0], (ast.In, ast.NotIn))
                and not isinstance(node.comparators[0], (ast.Tuple, ast.List, ast.Set))
                and left
                and right
            ):
                # "'x' in text" -> "text contains 'x'" (and the code's order is not repeated)
                return f"{right} {'contains' if isinstance(node.ops[0], ast.In) else 'does not contain'} {left}"
            if left and right and op:
                if isinstance(node.ops[0], (ast.Is, ast.IsNot, ast.Eq, ast.NotEq)) and right == "None":
                    return f"{left} is {'not ' if isinstance(node.ops[0], (ast.IsNot, ast.NotEq)) else ''}None"
                if right in ("0", "0.0") and isinstance(node.ops[0], ast.Eq) and left.startswith("the length of"):
                    return f"{left[len('the length of ') :]} is empty"
                return f"{left} {op} {right}"
            return None
        text = ast.unparse(node)
        return text if len(text) <= 24 else None

    def effect_words(self, body: list[ast.stmt]) -> str | None:
        if not body:
            return None
        st = body[0]
        if isinstance(st, ast.Return):
            if st.value is None:
                return "it returns None"
            v = _const(st.value)
            if v is not _NOTHING:
                return f"it returns {literal(v)}"
            if (
                isinstance(st.value, (ast.List, ast.Dict, ast.Tuple))
                and not getattr(st.value, "elts", None)
                and not getattr(st.value, "keys", None)
            ):
                return f"it returns an empty {type(st.value).__name__.lower()}"
            form = self.form(st.value)
            return f"it returns {form}" if form else "it returns early"
        if isinstance(st, ast.Raise):
            return f"it raises {self.exc_name(st)}"
        if isinstance(st, ast.If):
            return "it then checks further conditions"
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Subscript):
            target, value = self.side(st.targets[0]), self.side(st.value)
            if target and value:
                return f"{target} is set to {value}"
        if isinstance(st, ast.Continue):
            return "that item is skipped"
        if isinstance(st, ast.Break):
            return "it stops looping"
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
            name, val = st.targets[0].id, st.value
            v = fold(val)
            if v is not _NOTHING:
                return f"{name} becomes {literal(v)}"
            if (
                isinstance(val, ast.BinOp)
                and type(val.op) in _ARITH_WORDS
                and isinstance(val.left, ast.Name)
                and val.left.id == name
            ):
                amount = self.side(val.right)
                if amount:
                    return f"{name} is {_ARITH_WORDS[type(val.op)]} {amount}"
        if isinstance(st, ast.AugAssign) and type(st.op) in _ARITH_WORDS:
            target, v = self.side(st.target), _const(st.value)
            amount = literal(v) if v is not _NOTHING else self.side(st.value)
            if target and amount:
                if isinstance(st.op, ast.Add):
                    return f"{target} goes up by {amount}"
                if isinstance(st.op, ast.Sub):
                    return f"{target} goes down by {amount}"
                return f"{target} is {_ARITH_WORDS[type(st.op)]} {amount}"
        if (
            isinstance(st, ast.Expr)
            and isinstance(st.value, ast.Call)
            and isinstance(st.value.func, ast.Attribute)
            and st.value.func.attr in ("append", "add", "extend")
            and st.value.args
        ):
            what, where = self.side(st.value.args[0]), self.side(st.value.func.value)
            if what and where:
                return f"{what} is added to {where}"
        return None

    @staticmethod
    def exc_name(st: ast.Raise) -> str:
        exc = st.exc
        if isinstance(exc, ast.Call):
            exc = exc.func
        if isinstance(exc, ast.Name):
            return exc.id
        if isinstance(exc, ast.Attribute):
            return exc.attr
        return "an exception"

    # ---------------------------------------------------------------- forms of values
    def form(self, node: ast.AST, depth: int = 0) -> str | None:
        """What kind of value an expression gives, in words."""
        if depth > 3:
            return None
        v = _const(node)
        if v is not _NOTHING:
            if v is None:
                return "None"
            if isinstance(v, bool):
                return "True or False"
            if isinstance(v, str):
                return "a string"
            return "a number"
        if isinstance(node, (ast.JoinedStr,)):
            return "a formatted string"
        if isinstance(node, (ast.List, ast.ListComp)):
            return "a list"
        if isinstance(node, ast.Dict):
            keys = [_const(k) for k in node.keys if k is not None]
            skeys = [k for k in keys if isinstance(k, str)]
            if skeys and len(skeys) == len(node.keys) and len(skeys) <= 6:
                return f"a dictionary with keys {_join([repr(k) for k in skeys])}"
            return "a dictionary"
        if isinstance(node, ast.DictComp):
            return "a dictionary"
        if isinstance(node, (ast.Set, ast.SetComp)):
            return "a set"
        if isinstance(node, ast.Tuple):
            return f"a tuple of {len(node.elts)} values"
        if isinstance(node, (ast.Compare, ast.BoolOp)) or (
            isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)
        ):
            return "True or False"
        if isinstance(node, ast.IfExp):
            a, b = self.form(node.body, depth + 1), self.form(node.orelse, depth + 1)
            return a if a == b else (f"{a} or {b}" if a and b else None)
        if isinstance(node, ast.BinOp):
            if isinstance(node.op, ast.Div):
                return "a number (a float)"
            left = self.form(node.left, depth + 1)
            if isinstance(node.op, ast.Mod) and left == "a string":
                return "a formatted string"
            if isinstance(node.op, ast.Add) and left in ("a string", "a formatted string", "a list"):
                return left
            return "a number" if left in (None, "a number", "a number (a float)") else left
        if isinstance(node, ast.Call):
            return self.call_form(node, depth)
        if isinstance(node, ast.Name):
            if node.id in self.params and node.id not in self.assigned:
                return f"its {node.id} argument itself (after any changes)"
            if node.id in self.assigned:
                forms = {self.form(v, depth + 1) for v in self.assigned[node.id]}
                forms.discard(None)
                if len(forms) == 1:
                    return forms.pop()
            for n in self.nodes:  # built up with .append / .update after an empty start
                if (
                    isinstance(n, ast.Call)
                    and isinstance(n.func, ast.Attribute)
                    and isinstance(n.func.value, ast.Name)
                    and n.func.value.id == node.id
                ):
                    if n.func.attr in LIST_METHODS:
                        return "a list"
                    if n.func.attr in ("update", "setdefault"):
                        return "a dictionary"
            return None
        return None

    def call_form(self, node: ast.Call, depth: int) -> str | None:
        f = node.func
        name = f.id if isinstance(f, ast.Name) else (f.attr if isinstance(f, ast.Attribute) else "")
        if name == "round":
            if len(node.args) >= 2 and _is_num(_const(node.args[1])):
                return f"a number rounded to {_const(node.args[1])} decimal places"
            return "a whole number (rounded)"
        simple = {
            "int": "an integer",
            "float": "a float",
            "str": "a string",
            "len": "an integer count",
            "bool": "True or False",
            "sum": "a number (a sum)",
            "sorted": "a sorted list",
            "list": "a list",
            "dict": "a dictionary",
            "set": "a set",
            "tuple": "a tuple",
            "abs": "a number",
            "max": "the largest value",
            "min": "the smallest value",
            "any": "True or False",
            "all": "True or False",
            "join": "a string",
            "format": "a formatted string",
            "tolist": "a list",
            "upper": "a string",
            "lower": "a string",
            "strip": "a string",
            "replace": "a string",
            "title": "a string",
            "split": "a list of strings",
            "count": "an integer count",
            "isinstance": "True or False",
            "startswith": "True or False",
            "endswith": "True or False",
            "strftime": "a date string",
            "strptime": "a datetime",
            "hexdigest": "a hex string",
            "sqrt": "a number (a float)",
            "Counter": "a Counter (dictionary of counts)",
            "zip": None,
        }
        if name in simple:
            return simple[name]
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "math":
            return "a number"
        return None

    # ---------------------------------------------------------------- facts
    def signature(self) -> _Draft:
        a = self.func.args
        pos = [*a.posonlyargs, *a.args]
        defaults = dict(zip([x.arg for x in pos][len(pos) - len(a.defaults) :], a.defaults))
        defaults.update({x.arg: d for x, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None})
        names = [p for p in self.params]
        opts = []
        for p, d in defaults.items():
            v = _const(d)
            shown = (
                literal(v)
                if v is not _NOTHING
                else (
                    "a lookup table"
                    if isinstance(d, ast.Dict)
                    else "a list"
                    if isinstance(d, ast.List)
                    else "a computed value"
                )
            )
            opts.append(f"{p} defaults to {shown}")
        if a.vararg is not None:
            opts.append(f"*{a.vararg.arg} collects extra positional arguments")
        if a.kwarg is not None:
            opts.append(f"**{a.kwarg.arg} collects extra keyword arguments")
        tail = ("; " + "; ".join(opts) if opts else " (none of them has a default)") + "."
        # Phrasings from most to least natural; the first that quotes no long span of the
        # reference is used (long parameter lists and very long names would otherwise quote it).
        spelled = {
            n: (" ".join(words_of(n)) + " (snake_case)" if len(n) >= 30 else n) for n in [self.func.name, *names]
        }
        variants = [
            f"The function is called {self.func.name} and takes {_join(names) if names else 'no arguments'}",
            f"The function is called {self.func.name}; its parameters, in order: {'; '.join(names) or 'none'}",
            f"The function is called {spelled[self.func.name]}; its parameters, in order: "
            f"{'; '.join(spelled[n] for n in names) or 'none'}",
        ]
        text = next((v + tail for v in variants if not shares_span(v + tail, self.source)), variants[-1] + tail)
        mods = self.modules()
        if mods:
            text += f" It uses the {_join(mods)} module{'s' if len(mods) > 1 else ''}."
        kws = [
            "signature",
            "name",
            "called",
            "parameter",
            "argument",
            "input",
            "default",
            "optional",
            *words_of(self.func.name),
            *names,
            *(w for n in names for w in words_of(n)),
        ]
        if mods:
            kws += ["module", "import", "library", *mods]
        return _Draft("signature", "signature", text, kws)

    def modules(self) -> list[str]:
        mods = []
        for n in ast.walk(self.tree):
            if isinstance(n, ast.Import):
                mods += [a.name.split(".")[0] for a in n.names]
            elif isinstance(n, ast.ImportFrom) and n.module:
                mods.append(n.module.split(".")[0])
        return sorted(dict.fromkeys(mods))

    def shapes(self) -> list[_Draft]:
        ev: dict[str, dict[str, set]] = {p: {} for p in self.params}

        def note(p: str, what: str, extra: object = None) -> None:
            if p in ev:
                ev[p].setdefault(what, set())
                if extra is not None:
                    ev[p][what].add(extra)

        loop_var: dict[str, str] = {}  # element variable -> parameter it iterates
        a = self.func.args
        for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs):
            if arg.annotation is not None and arg.arg in ev:
                ann = ast.unparse(arg.annotation)
                if len(ann) <= 30:
                    note(arg.arg, "annotation", ann)
        for n in self.nodes:
            if isinstance(n, (ast.For, ast.comprehension)):
                it = n.iter
                if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "enumerate" and it.args:
                    it = it.args[0]
                if (
                    isinstance(it, ast.Call)
                    and isinstance(it.func, ast.Attribute)
                    and isinstance(it.func.value, ast.Name)
                    and it.func.attr in ("items", "keys", "values")
                ):
                    note(it.func.value.id, "dict")
                elif isinstance(it, ast.Name):
                    note(it.id, "iterated")
                    tgt = n.target
                    if isinstance(n.iter, ast.Call) and isinstance(tgt, ast.Tuple) and len(tgt.elts) == 2:
                        tgt = tgt.elts[1]  # enumerate(x): the element is the second name
                    if isinstance(tgt, ast.Tuple):
                        note(it.id, "tuples", len(tgt.elts))
                    elif isinstance(tgt, ast.Name):
                        loop_var[tgt.id] = it.id
            elif isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name):
                k = _const(n.slice)
                target = n.value.id
                if target in loop_var:
                    if isinstance(k, str):
                        note(loop_var[target], "elem_keys", k)
                    elif isinstance(k, int):
                        note(loop_var[target], "elem_indexed")
                    continue
                if isinstance(k, str):
                    note(target, "dict", k)
                elif isinstance(n.slice, ast.Slice):
                    note(target, "sliced")
                else:
                    note(target, "indexed")
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name):
                target, meth = n.func.value.id, n.func.attr
                if target in loop_var:
                    if meth in DICT_METHODS:
                        arg0 = _const(n.args[0]) if n.args else _NOTHING
                        note(loop_var[target], "elem_keys", arg0) if isinstance(arg0, str) else note(
                            loop_var[target], "elem_dict"
                        )
                    elif meth in STR_METHODS:
                        note(loop_var[target], "elem_str")
                    continue
                if meth in DICT_METHODS:
                    arg0 = _const(n.args[0]) if n.args else _NOTHING
                    note(target, "dict", arg0 if isinstance(arg0, str) else None)
                elif meth in LIST_METHODS:
                    note(target, "list")
                elif meth in STR_METHODS:
                    note(target, "str")
            elif (
                isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.args and isinstance(n.args[0], ast.Name)
            ):
                if n.func.id == "len":
                    note(n.args[0].id, "len")
                elif n.func.id in ("sum", "max", "min", "sorted"):
                    note(n.args[0].id, "numbers_agg")
            elif isinstance(n, ast.BinOp) and isinstance(
                n.op, (ast.Mult, ast.Div, ast.Sub, ast.Pow, ast.FloorDiv, ast.Mod)
            ):
                for side_, other in ((n.left, n.right), (n.right, n.left)):
                    if isinstance(side_, ast.Name) and not (
                        isinstance(n.op, ast.Mod) and side_ is n.right and isinstance(_const(other), str)
                    ):
                        if isinstance(n.op, ast.Mult) and isinstance(_const(other), str):
                            continue
                        note(side_.id, "number")
            elif isinstance(n, ast.Compare) and isinstance(n.left, ast.Name) and len(n.ops) == 1:
                v = _const(n.comparators[0])
                if _is_num(v) and isinstance(n.ops[0], (ast.Lt, ast.LtE, ast.Gt, ast.GtE)):
                    note(n.left.id, "number")
                elif isinstance(v, str) and isinstance(n.ops[0], (ast.Eq, ast.NotEq)):
                    note(n.left.id, "str_value", v)
                elif isinstance(n.ops[0], (ast.In, ast.NotIn)) and isinstance(
                    n.comparators[0], (ast.Tuple, ast.List, ast.Set)
                ):
                    vals = [_const(e) for e in n.comparators[0].elts]
                    if all(isinstance(x, str) for x in vals):
                        for x in vals:
                            note(n.left.id, "str_value", x)
        out = []
        for p in self.params:
            text = self._shape_text(p, ev[p])
            if text:
                kws = [p, *words_of(p), "type", "input", "format", "shape", "look", "structure", "kind", "value"]
                kws += [
                    w for w in ("list", "dictionary", "dict", "string", "number", "keys", "pairs", "tuple") if w in text
                ]
                out.append(_Draft("shape", f"shape.{p}", text, kws))
        return out

    @staticmethod
    def _shape_text(p: str, e: dict[str, set]) -> str | None:
        if not e:
            return None
        if "annotation" in e:
            return f"{p} is a {sorted(e['annotation'])[0]}."
        elem = ""
        if e.get("elem_keys"):
            keys = sorted(k for k in e["elem_keys"] if isinstance(k, str))[:5]
            elem = f" of dictionaries with keys {_join([repr(k) for k in keys])}"
        elif "elem_dict" in e:
            elem = " of dictionaries"
        elif e.get("tuples"):
            elem = (
                f" of {min(e['tuples'])}-item tuples (pairs)"
                if min(e["tuples"]) == 2
                else f" of {min(e['tuples'])}-item tuples"
            )
        elif "elem_str" in e:
            elem = " of strings"
        elif "numbers_agg" in e:
            elem = " of numbers"
        if "dict" in e:
            keys = sorted(k for k in e["dict"] if isinstance(k, str))[:5]
            return (
                f"{p} is a dictionary" + (f" with keys such as {_join([repr(k) for k in keys])}" if keys else "") + "."
            )
        if "str" in e or "str_value" in e:
            vals = sorted(e.get("str_value", set()))[:5]
            extra = f" such as {_join([literal(v) for v in vals])}" if vals else ""
            return f"{p} is a string{extra}."
        if "list" in e:
            return f"{p} is a list{elem}."
        if {"indexed", "sliced"} & e.keys() or ("len" in e and "iterated" in e):
            return f"{p} is a list or sequence{elem}, accessed by position."
        if "iterated" in e or "len" in e or "numbers_agg" in e:
            return f"{p} is a list (any iterable){elem}."
        if "number" in e:
            return f"{p} is a number."
        return None

    def returns(self) -> _Draft:
        rets = [n for n in self.nodes if isinstance(n, ast.Return)]
        if not rets:
            text = "It returns nothing (None); it only has side effects."
        else:
            forms = []
            for r in rets:
                f = self.form(r.value) if r.value is not None else "None"
                if f and f not in forms:
                    forms.append(f)
            # "a number" adds nothing next to "a number rounded to 2 decimal places".
            forms = [f for f in forms if not any(g != f and g.startswith(f) for g in forms)]
            if not forms:
                text = "It returns the computed result."
            elif len(forms) == 1:
                text = f"It returns {forms[0]}."
            else:
                text = f"It returns {forms[0]} in some cases and otherwise {_join(forms[1:4])}."
        kws = ["return", "returns", "output", "result", "type", "format", "give", "back"]
        kws += [
            w
            for w in (
                "list",
                "dictionary",
                "string",
                "number",
                "rounded",
                "decimal",
                "tuple",
                "boolean",
                "true",
                "false",
                "none",
                "sorted",
                "integer",
                "float",
                "keys",
            )
            if w in text.lower()
        ]
        return _Draft("return", "return", text, kws)

    def branches(self) -> tuple[list[_Draft], list[_Draft]]:
        edges: list[_Draft] = []
        consts: list[_Draft] = []
        seen: set[str] = set()
        for n in self.nodes:
            if isinstance(n, ast.If):
                cond = self.cond_words(n.test)
                effect = self.effect_words(n.body)
                if not cond:
                    continue
                text = f"If {cond}, {effect or 'it handles that case separately'}."
                if text in seen:
                    continue
                seen.add(text)
                kind = "edge_case" if self._edge_like(n.test, n.body) else "constant"
                names = sorted({x.id for x in ast.walk(n.test) if isinstance(x, ast.Name) and x.id in self.params})
                kws = [*names, *(w for x in names for w in words_of(x)), "when", "case", "if", "happens"]
                kws += self._literal_words(n.test)
                if kind == "edge_case":
                    kws += ["edge", "empty", "none", "zero", "negative", "invalid", "error", "exception", "handle"]
                    edges.append(_Draft(kind, f"edge.{len(edges) + 1}", text, kws))
                else:
                    kws += ["threshold", "limit", "cutoff", "value", "above", "below", "condition", "rule"]
                    consts.append(_Draft(kind, f"const.branch.{len(consts) + 1}", text, kws))
        for n in self.nodes:  # conditional expressions: "a if cond else b"
            if isinstance(n, ast.IfExp):
                cond = self.cond_words(n.test)
                a, b = self.side(n.body), self.side(n.orelse)
                if not (cond and a and b):
                    continue
                text = f"If {cond}, the value used is {a}; otherwise {b}."
                if text in seen:
                    continue
                seen.add(text)
                names = sorted({x.id for x in ast.walk(n.test) if isinstance(x, ast.Name) and x.id in self.params})
                kws = [
                    *names,
                    *(w for x in names for w in words_of(x)),
                    "when",
                    "case",
                    "if",
                    "otherwise",
                    *self._literal_words(n.test),
                ]
                if self._edge_like(n.test, []):
                    edges.append(_Draft("edge_case", f"edge.{len(edges) + 1}", text, kws + ["edge", "empty", "zero"]))
                else:
                    consts.append(
                        _Draft(
                            "constant",
                            f"const.branch.{len(consts) + 1}",
                            text,
                            kws + ["threshold", "limit", "cutoff", "value", "condition", "rule"],
                        )
                    )
        for n in self.nodes:
            if isinstance(n, ast.Raise) and not any(
                n in getattr(i, "body", []) for i in self.nodes if isinstance(i, ast.If)
            ):
                text = f"It can raise {self.exc_name(n)} on invalid input."
                if text not in seen:
                    seen.add(text)
                    edges.append(
                        _Draft(
                            "edge_case",
                            f"edge.{len(edges) + 1}",
                            text,
                            ["raise", "error", "exception", "invalid", self.exc_name(n).lower()],
                        )
                    )
        return edges, consts

    def _edge_like(self, test: ast.AST, body: list[ast.stmt]) -> bool:
        if body and isinstance(body[0], ast.Raise):
            return True
        for x in ast.walk(test):
            if isinstance(x, ast.UnaryOp) and isinstance(x.op, ast.Not):
                return True
            if isinstance(x, ast.Call) and isinstance(x.func, ast.Name) and x.func.id in ("isinstance", "len"):
                return True
            if isinstance(x, ast.Compare):
                for c in x.comparators:
                    v = _const(c)
                    if v is None or (_is_num(v) and v <= 0):
                        return True
        return isinstance(test, ast.Name)

    @staticmethod
    def _literal_words(test: ast.AST) -> list[str]:
        out = []
        for x in ast.walk(test):
            v = _const(x)
            if isinstance(v, str) and len(v) < 30:
                out += words_of(v)
            elif _is_num(v):
                out.append(str(v))
        return out

    @staticmethod
    def _table(name: str, node: ast.Dict, add, default: bool = False) -> None:
        """A fact about a literal lookup table (its first four entries)."""
        pairs = []
        for k, val in zip(node.keys[:4], node.values[:4]):
            kv, vv = _const(k) if k is not None else _NOTHING, _const(val)
            if kv is _NOTHING or vv is _NOTHING:
                return
            pairs.append(f"{literal(kv)} to {literal(vv)}")
        more = " (among others)" if len(node.keys) > 4 else ""
        words = " ".join(words_of(name)) or name
        lead = f"By default {name}" if default else f"The {words} table"
        add(
            f"{lead} maps {'; '.join(pairs)}{more}.",
            [
                name,
                *words_of(name),
                "table",
                "mapping",
                "default",
                *(
                    w
                    for k in node.keys[:4]
                    if k is not None and isinstance(_const(k), str)
                    for w in words_of(str(_const(k)))
                ),
            ],
        )

    def constants(self) -> list[_Draft]:
        out: list[_Draft] = []
        seen: set[str] = set()

        def add(text: str, kws: list[str]) -> None:
            if text not in seen:
                seen.add(text)
                out.append(
                    _Draft(
                        "constant",
                        f"const.{len(out) + 1}",
                        text,
                        kws + ["value", "constant", "rate", "factor", "amount", "number", "how", "much"],
                    )
                )

        # Parameter defaults that are tables (a scalar default is in the signature fact).
        a = self.func.args
        pos = [*a.posonlyargs, *a.args]
        for arg, d in zip(pos[len(pos) - len(a.defaults) :], a.defaults):
            if isinstance(d, ast.Dict) and d.keys:
                self._table(arg.arg, d, add, default=True)
        # Named constants: module level and at the top of the function.
        scopes = [s for s in self.tree.body if isinstance(s, ast.Assign)] + [
            s for s in self.func.body if isinstance(s, ast.Assign)
        ]
        for st in scopes:
            if len(st.targets) != 1 or not isinstance(st.targets[0], ast.Name):
                continue
            name = st.targets[0].id
            v = _const(st.value)
            words = " ".join(words_of(name)) or name
            if _is_num(v) and v not in TRIVIAL_NUMBERS or isinstance(v, str) and v:
                add(f"The {words} is {literal(v)}.", [name, *words_of(name)])
            elif isinstance(st.value, ast.Dict) and st.value.keys:
                self._table(name, st.value, add)
        # Lookup defaults: table.get(key, default).
        for n in self.nodes:
            if (
                isinstance(n, ast.Call)
                and isinstance(n.func, ast.Attribute)
                and n.func.attr == "get"
                and len(n.args) == 2
                and isinstance(n.func.value, ast.Name)
            ):
                v = _const(n.args[1])
                if v is not _NOTHING:
                    key = self.side(n.args[0]) or "the key"
                    add(
                        f"When {key} is not found in {n.func.value.id}, {literal(v)} is used instead.",
                        [n.func.value.id, *words_of(n.func.value.id), "default", "missing", "unknown", "found"],
                    )
            if isinstance(n, ast.AugAssign) and type(n.op) in _ARITH_WORDS:
                v = _const(n.value)
                if _is_num(v) and v not in TRIVIAL_NUMBERS:
                    target = self.side(n.target) or "the running value"
                    add(
                        f"{_cap(target)} is {_ARITH_WORDS[type(n.op)]} {literal(v)} at that step.",
                        [*words_of(target), str(v)],
                    )
        # Numbers in arithmetic.
        for n in self.nodes:
            if isinstance(n, ast.BinOp) and type(n.op) in _ARITH_WORDS and fold(n) is _NOTHING:
                for mine, other in ((n.right, n.left), (n.left, n.right)):
                    v = fold(mine)
                    if fold(other) is not _NOTHING:
                        continue
                    if not _is_num(v) or v in TRIVIAL_NUMBERS or (isinstance(n.op, ast.Pow) and v in (2, 0.5)):
                        continue
                    what = self.side(other) or "the value"
                    if mine is n.right:
                        text = f"{_cap(what)} is {_ARITH_WORDS[type(n.op)]} {literal(v)}."
                    else:
                        text = (
                            f"The number {literal(v)} is combined with {what} ({_ARITH_WORDS[type(n.op)].split()[0]})."
                        )
                    names = [x.id for x in ast.walk(other) if isinstance(x, ast.Name)]
                    add(text, [*names, *(w for x in names for w in words_of(x)), str(v)])
        return out


# --------------------------------------------------------------------------- entry points
def find_function(tree: ast.Module, name: str | None) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The task's function: the top-level def called ``name``, else the first top-level def, else any def."""
    defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for d in defs:
        if d.name == name:
            return d
    if name:
        for d in ast.walk(tree):
            if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef)) and d.name == name:
                return d
    if defs:
        return defs[0]
    return next((d for d in ast.walk(tree) if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef))), None)


def _signature_from_prompt(prompt: str, name: str | None) -> _Draft | None:
    found = _SIG_RE.findall(prompt or "")
    if not found:
        return None
    fname, params = found[-1]
    names = [p.split("=")[0].split(":")[0].strip() for p in params.split(",") if p.strip()]
    text = f"The function is called {fname} and takes {_join(names) if names else 'no arguments'}."
    return _Draft(
        "signature",
        "signature",
        text,
        ["signature", "name", "called", "parameter", "argument", "input", *words_of(fname), *names],
    )


def extract_facts(reference: str, prompt: str = "", function: str | None = None) -> list[Fact]:
    """Facts of every kind about ``reference`` (see the module docstring); the signature fact comes
    first. ``function`` names the task's function (default: the one in the prompt's signature)."""
    if function is None:
        found = _SIG_RE.findall(prompt or "")
        function = found[-1][0] if found else None
    drafts: list[_Draft] = []
    try:
        with warnings.catch_warnings():  # e.g. invalid escape sequences in the reference's strings
            warnings.simplefilter("ignore", (SyntaxWarning, DeprecationWarning))
            tree = ast.parse(reference)
        func = find_function(tree, function)
    except (SyntaxError, ValueError):
        tree, func = None, None
    if tree is None or func is None:
        sig = _signature_from_prompt(prompt, function)
        drafts = [sig] if sig else []
    else:
        an = _Analysis(tree, func, reference)
        edges, thresholds = an.branches()
        drafts = [
            an.signature(),
            an.returns(),
            *an.shapes()[: PER_KIND["shape"]],
            *edges[: PER_KIND["edge_case"]],
            *(thresholds + an.constants())[: PER_KIND["constant"]],
        ]
    facts = []
    for d in drafts:
        if shares_span(d.text, reference):
            continue  # would quote the reference; a collaborator never pastes code
        kws = tuple(dict.fromkeys(k.lower() for k in d.keywords if k))
        facts.append(Fact(key=d.key, kind=d.kind, text=d.text, keywords=kws))
    return facts
