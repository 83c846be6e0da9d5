"""Mutation run over the rules' guards: does every precondition a rule checks have a test that fails without it?

A guard is an `if <cond>:` whose body only bails out (`return`, `return None / [] / False / ()`, `continue`),
in any function of tvm_rl/graph/rules/*.py, or an `if <cond>:` whose body offers a match (`self.match(...)`).
Each guard gives the mutants
  delete        the condition replaced by False (a bail-out never fires) or True (a match always offered);
  drop k        one operand of an `or` chain (in the bail-out polarity; of an `and` chain under a `not`,
                and of an `and` chain guarding a match) replaced so that it no longer counts: that one
                precondition removed;
  negate        (with --negate) the condition replaced by `not (cond)`.
Each mutant is written into a temporary copy of the repository (the working tree is never modified) and the
test command is run there; a failing run kills the mutant. Survivors are listed with an explanation where one
is known (EQUIVALENT below: mutants that cannot change what a rule offers or computes).

    python benchmarks/guard_mutants.py                      # every guard (slow: about 10-20 s a mutant)
    python benchmarks/guard_mutants.py --rule conv.py --limit 10
"""
from __future__ import annotations

import argparse
import ast
import json
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the repository root on sys.path, for `benchmarks`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import jsonfile  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RULES = Path("tvm_rl/graph/rules")
DEFAULT_TESTS = ("tests/graph/test_guards.py tests/graph/test_graph_rules_small.py "
                 "tests/graph/test_rules_linear_merge.py tests/graph/test_rules_algebra.py "
                 "tests/graph/test_rules_gemm.py tests/graph/test_rules_reshape_past.py "
                 "tests/graph/test_fuzz_regressions.py -m 'not slow' -x -q -p no:cacheprovider")

# Survivors known to be equivalent mutants, keyed by (file, source text of the mutated expression): why the
# rule offers or computes the same without that check. Keyed by text, not line, so that edits elsewhere in a
# file keep the explanation attached.
EQUIVALENT: dict[tuple[str, str], str] = {
    ("conv.py", "weight.ndim != 4"):
        "Relax's conv2d refuses a weight of rank other than 4 (OIHW needs 4 dims) when the graph is built, so "
        "plain_conv never sees one; the check only documents the weight[:, :, 0, 0] indexing after it.",
    ("conv.py", "item"):
        "`g.values.get(item) if item else None`: without the check, g.values.get(None) is None as well.",
    ("conv.py", "channels is None"):
        "without it a None channel count reaches `p.shape != (None,)`, true for every parameter: still skipped.",
    ("conv.py", "p.shape != (channels,)"):
        "Relax's batch_norm requires its parameters as long as the normalised axis (checked when the graph is "
        "built), and `channels` is that axis's length in both forms (the conv's C at axis 1, the matmul's "
        "columns at the permuted axis).",
    ("conv.py", "float_tensor(g.vars[name]) is None"):
        "const_weight_matmul already requires the matmul's result to be a static float tensor, and "
        "permute_dims keeps its dtype and (permuted) static shape.",
    ("conv.py", "other == name"):
        "the conv itself is a 1x1 here, which the `(kh, kw) == (1, 1)` operand of the same guard excludes.",
    # attention.py, _transparent: every tensor it looks at is also checked elsewhere on the chain.
    ("attention.py", "dst is None"):
        "dst is the chain node whose shape attention_parts checked just before (line `shape is None ...`), or "
        "p (checked by _plain_matmul), or the src of the previous reshape (checked by this same guard).",
    ("attention.py", "src is None"):
        "likely equivalent (argued, not shown by a test): reshape / broadcast_to keep the dtype, and a "
        "dynamic-shaped src reshaped to the static scores would need a symbolic score matmul, which "
        "_plain_matmul / the static-shape checks refuse; no such graph was built to kill it.",
    ("attention.py", "src is None or dst is None or src[1] != dst[1] or not src[0] or not dst[0]"):
        "each of its operands is equivalent (see them); together they only let _transparent read src / dst.",
    ("attention.py", "src[1] != dst[1]"): "reshape and broadcast_to never change the dtype.",
    ("attention.py", "not src[0]"):
        "a rank-0 tensor on the chain: softmax over the last axis and the 3-D matmuls at both ends make every "
        "tensor between them at least rank 1 with the keys as last axis (a reshape to () would need one element "
        "and a rank-0 softmax input is refused by Relax).",
    ("attention.py", "not dst[0]"): "as `not src[0]`.",
    ("attention.py", "src[0][-1] != keys"):
        "row-major reshapes compose: a chain of them between two tensors whose last axis is the keys (the "
        "score matmul / p and the softmax input, both checked) is one reshape keeping every row, whatever the "
        "shapes between; scalar scales commute with it and biases are reshaped along (bias.reshape).",
    ("attention.py", "src[0][-1] != keys or dst[0][-1] != keys"): "as `src[0][-1] != keys`.",
    ("attention.py", "dst[0][-1] != keys"): "as `src[0][-1] != keys`.",
    ("attention.py", 'getattr(getattr(call, "op", None), "name", None) != "relax.matmul"'):
        "_plain_matmul is only called on bindings already known to be matmuls (g.calls('relax.matmul') and "
        "the chain walk's `op == 'relax.matmul'` break).",
    ("attention.py", "out_dtype(call.attrs) not in (None, out[1])"):
        "Relax gives a matmul with out_dtype set a result of that dtype, so out_dtype is None or out[1].",
    ("attention.py", "sa[2] != sb[1]"): "Relax refuses a matmul whose inner dimensions differ.",
    ("attention.py", "not _transparent(g, name, keys)"):
        "one of the two reshape / broadcast_to chains (before or after the softmax) unchecked, the other checked: "
        "the ends are pinned (score matmul (G, Sq, Sk), p (G, Sq, Sk), constants never broadcast the scores "
        "bigger), so the element count is the same at both ends of the unchecked chain; broadcast_to can only "
        "keep or grow it, so every broadcast there is the identity, and row-major reshapes compose into one "
        "keeping the last (keys) axis rows intact.",
    ("attention.py", "shape is None or shape[1] != dtype or not shape[0] or shape[0][-1] != keys"):
        "each operand is implied on the score chain: reshape / broadcast_to / add / multiply / divide keep the "
        "dtype (Relax refuses mixed-dtype arithmetic, and the constant's dtype is checked), the ends are static "
        "and of the keys, and row-major reshapes compose (see `not _transparent(...)`), so an intermediate shape "
        "of another last axis changes nothing; the bias is reshaped along with the scores.",
    ("attention.py", "shape is None"): "see the whole guard `shape is None or ...`.",
    ("attention.py", "shape[1] != dtype"): "see the whole guard `shape is None or ...`.",
    ("attention.py", "not shape[0]"): "see the whole guard `shape is None or ...`.",
    ("attention.py", "shape[0][-1] != keys"): "see the whole guard `shape is None or ...`.",
    ("attention.py", "c is None"):
        "`sides` keeps the non-constant variable operands and exactly one is required, so the other operand is "
        "a constant(-foldable) one: g.const never gives None for it.",
    ("attention.py", "float_tensor(u) != shape"):
        "the ends of the chain pin its element count (G * Sq * Sk at the score matmul and at p), and reshapes "
        "keep the count, so a constant can only broadcast the scores by adding leading 1-axes, which changes "
        "nothing (the scale is a scalar, the bias is broadcast to the node's shape and reshaped along).",
    ("attention.py", "c is None or float_tensor(u) != shape or str(c.dtype) != dtype"):
        "each of its three operands is equivalent (see them).",
    ("attention.py", "qk[2] != dtype"):
        "every op from the score matmul to p (reshapes, scalar arithmetic, softmax) keeps the dtype, and p's "
        "dtype is the one checked (float32).",
    ("attention.py", "tuple(pv[1][:2]) != (groups, keys)"):
        "_plain_matmul already requires v's batch to be p's (sa[0] == sb[0]) and its rows p's columns "
        "(sa[2] == sb[1]), which are (groups, keys).",
    ("nhwc.py", "float_tensor(u) != result"):
        "the other checks leave only a same-rank broadcast of permute_dims(x) by a constant (a non-float u fails "
        "`float_tensor(perm.args[0]) is None`, another rank `ndim_of(...) != len(result[0])`), and broadcasting "
        "commutes with the transpose: f(x, transpose(c, argsort(p))) permuted by p is f(permute(x), c).",
    ("nhwc.py", "float_tensor(perm.args[0]) is None"):
        "permute_dims keeps dtype and staticness, so perm.args[0] is a static float exactly when u is, and u is "
        "compared with the (checked non-None) result just before. (This and `result is None` each hold only "
        "with the other in place: equivalent one at a time, as the mutants are run.)",
    ("nhwc.py", "ndim_of(perm.args[0]) != len(result[0])"):
        "u (the permute's output, of its input's rank) has already been required to be exactly the result's "
        "type (`float_tensor(u) != result`), rank included.",
    ("nhwc.py", "float_tensor(perm.args[0]) is None or ndim_of(perm.args[0]) != len(result[0])"):
        "both operands follow from `float_tensor(u) == result` (the permute keeps dtype, staticness and rank).",
    ("nhwc.py", "c.ndim > len(result[0])"):
        "the result of a binary op has at least the rank of each operand (broadcasting), so a constant operand "
        "never has more axes than the result.",
    ("nhwc.py", "str(c.dtype) != result[1]"): "Relax refuses arithmetic between tensors of different dtypes.",
    ("nhwc.py", "np.broadcast_shapes(c.shape, result[0]) != result[0]"):
        "the result's shape is the broadcast of both operands' shapes, so broadcasting c against it gives it "
        "back whenever the op built.",
    ("nhwc.py", "result is None"):
        "a non-float or dynamic result is skipped further on anyway: an element-wise op's operand u then differs "
        "from it (`float_tensor(u) != result`), or, both None, `float_tensor(perm.args[0]) is None` holds (the "
        "permute keeps its input's dtype).",
    ("attention.py", "str(c.dtype) != dtype"): "Relax refuses arithmetic between tensors of different dtypes.",
    ("attention.py", "sm_in is None"):
        "the softmax output is p itself (a static float, checked by _plain_matmul) or the src of a reshape "
        "_transparent checked.",
    ("attention.py", "sm_in[0][-1] != keys"):
        "as `sm_in is None`: p's last axis is the keys, and _transparent checks the keys on each reshape's src.",
    ("nhwc.py", 'len(c["shape"]) == 4'):
        "plain_conv only returns NCHW-in, NCHW-out conv2d with a static float result, and an NCHW conv2d "
        "result always has rank 4 (Relax checks the layouts when the graph is built).",
    ("concat.py", "len(a.args) != len(b.args)"):
        "checked after `a.op.same_as(b.op)`, and every operator in ACTIVATIONS has a fixed arity (Relax refuses "
        "a call with another argument count when it is normalised, e.g. relu(x, x)), so two calls of one op "
        "have as many arguments.",
    ("concat.py", "(a.attrs is None) != (b.attrs is None)"):
        "Relax's constructors give every call of one of these ops the op's attrs (leakyrelu, softplus) or none "
        "(the others); only hand-built calls differ, and then either the op ignores stray attrs (same result), "
        "or an attrs-less leakyrelu / softplus cannot be legalized, so the module never builds; and with the "
        "set attrs first, the next guard's structural_equal(attrs, None) already refuses.",
    ("concat.py", 'getattr(result, "ndim", -1) is None'):
        "a concat's result is a TensorType, whose ndim is always an int (-1 when the rank is unknown), never "
        "None; the unknown rank is the next operand's `result.ndim < 0`.",
    ("concat.py", "isinstance(call.args[0], Var) and g.single_use(call.args[0].name) != name"):
        "implied by the guard before it: when the concat reads its tuple through a variable, the fields are "
        "read by that tuple's binding, not by the concat, so `g.single_use(f.name) != name` has already "
        "skipped it (a non-variable field has no producer and is skipped at `a is None`).",
    ("layout.py", "str(x.ty.dtype) != str(g.vars[name].ty.dtype)"):
        "reshape, broadcast_to and permute_dims never change the dtype (Relax infers their result's from the "
        "input); a binding annotated by hand with a weaker type (no dtype) is the only difference, and "
        "replacing it by its input is still exact.",
    ("linear.py", 'mm["weight"].shape[0] != int(mm["x"].ty.shape[1])'):
        "with a 2-D weight a rank-2 result means a rank-2 x [N, C] (Relax's matmul keeps x's rank, or gives "
        "rank 1 for a 1-D x), and Relax refuses a matmul whose static inner dimensions differ, so C is always "
        "the weight's rows.",
    ("matmul.py", "producer is None"):
        "a u with no binding in the block (an input) reaches _options(g, None, ...), whose operator name is then "
        "None, in none of its cases: it returns [], so no match is offered either way.",
    ("pool.py", "dim not in layout or dim not in out_layout"):
        "Relax refuses a max_pool2d whose data or output layout is not convertible to NCHW (one without an H "
        "or a W axis) when the graph is built.",
    ("pool.py", "dim not in layout"): "see `dim not in layout or dim not in out_layout`.",
    ("pool.py", "dim not in out_layout"): "see `dim not in layout or dim not in out_layout`.",
    ("pool.py", "float_tensor(x) is None"):
        "x is the max_pool2d's input: the pool keeps its dtype, and a symbolic dimension of x stays symbolic in "
        "the result, so when x is not a static float tensor neither is the result, refused at `out_t is None`.",
    ("pool.py", "float_tensor(act.args[0]) != float_tensor(x)"):
        "every op in MONOTONE is element-wise and keeps its input's shape and dtype, so its input's type is "
        "always its output x's.",
    ("pool.py", "float_tensor(x) is None or float_tensor(act.args[0]) != float_tensor(x)"):
        "each operand is equivalent (see them): a non-static-float x is refused at `out_t is None`, and the "
        "activation keeps its input's type.",
    ("pool.py", "out_t is None"):
        "x has been checked to be a static float tensor, and max_pool2d's result then is one too (same dtype, "
        "a shape computed from static sizes).",
    ("pool.py", "x is None"):
        "avg_pool2d keeps its input's dtype and a symbolic input size stays symbolic in its result, so a "
        "non-static-float x gives a non-static-float y, refused by the next operand `y is None`.",
    ("pool.py", "y is None"):
        "as `x is None` the other way: a static float x (checked) gives a static float result.",
    ("pool.py", "len(x[0]) != 4"):
        "the next guard requires NCHW data and output layouts, and Relax refuses an avg_pool2d whose input "
        "rank differs from its (unpacked) layout's 4 axes.",
    ("pool.py", "x[1] != y[1]"): "avg_pool2d has no out_dtype: its result always has its input's dtype.",
    ("simplify.py", "tvm_ffi.structural_equal(g.values[earlier], value)"):
        "equal expr_keys already mean structurally equal values (operator, attrs, ty_args, constants and other "
        "leaves by structural_hash, variables by their unique names), up to a 64-bit hash collision; the "
        "check is the exact confirmation fingerprint.py asks of callers, no test can collide a hash.",
    ("simplify.py", "0 <= int(item.index) < len(tup.fields)"):
        "Relax refuses a TupleGetItem whose index is negative or past the tuple's size when it is normalised "
        "(`Index out of bounds`), so the index of a bound item is always in range.",
    ("ir.py", "ty.shape is None"):
        "an unknown shape reaches `getattr(ty.shape, 'values', None)`, which is None for it, and the next guard "
        "`shape is None` returns None just the same.",
    ("ir.py", "user"):
        "`g.values.get(user) if user else None`: without the check, g.values.get(None) is None as well.",
    ("ir.py", "len(sides) != 1"):
        "the add is g.single_use(name), which reads `name` exactly once (add(y, y) lists the add twice among y's "
        "users, so single_use is None and the op check already returned), and Relax's add has two arguments: "
        "exactly one side is not `name`.",
}


@dataclass
class Mutant:
    file: str  # relative to the repository root
    line: int
    kind: str  # "delete", "drop 1", "negate"
    original: str  # source text of the expression replaced
    replacement: str
    span: tuple[int, int, int, int]  # (lineno, col, end_lineno, end_col) of the expression, as ast gives it
    function: str = ""
    status: str = ""  # "killed", "survived", "timeout" (counted as killed), "error"
    seconds: float = 0.0
    explanation: str = field(default="")


def _bails_out(body: list[ast.stmt]) -> bool:
    """The body of a guard: only a `continue`, or a `return` of nothing / None / False / an empty literal."""
    if len(body) != 1:
        return False
    s = body[0]
    if isinstance(s, ast.Continue):
        return True
    if not isinstance(s, ast.Return):
        return False
    v = s.value
    return (v is None or (isinstance(v, ast.Constant) and v.value in (None, False))
            or (isinstance(v, (ast.List, ast.Tuple, ast.Dict)) and not getattr(v, "elts", getattr(v, "keys", [])))
            )


def _offers(body: list[ast.stmt]) -> bool:
    """The body of a positive guard: it calls `self.match(...)` (directly or in an `out.append(...)`)."""
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "match"
               for s in body for n in ast.walk(s))


def _operands(test: ast.expr, negated: bool = False):
    """(operand, neutral value) for each operand whose removal drops one precondition of the guard `test`:
    operands of `or` chains where the guard fires when the chain is true (replaced by False), and of `and`
    chains under a `not` (replaced by True). Nested chains are walked too."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        yield from _operands(test.operand, not negated)
    elif (isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "any"
          and len(test.args) == 1 and isinstance(test.args[0], ast.GeneratorExp)):
        yield from _operands(test.args[0].elt, negated)  # any(a or b for ...): the same polarity as a or b
    elif isinstance(test, ast.BoolOp):
        weakening = isinstance(test.op, ast.And) if negated else isinstance(test.op, ast.Or)
        for v in test.values:
            if weakening:
                yield v, "True" if negated else "False"
            yield from _operands(v, negated)


def find_mutants(path: Path, negate: bool = False) -> list[Mutant]:
    """Every guard mutant of one rules file."""
    src = path.read_text()
    tree = ast.parse(src)
    rel = str(path.relative_to(ROOT))
    out: list[Mutant] = []

    def text(node: ast.AST) -> str:
        return ast.get_source_segment(src, node) or ""

    def span(node: ast.AST) -> tuple[int, int, int, int]:
        return node.lineno, node.col_offset, node.end_lineno, node.end_col_offset

    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if (isinstance(node, ast.IfExp) and isinstance(node.orelse, ast.Constant)
                    and node.orelse.value in (None, False)):
                # `x if <cond> else None`: a guard the other way round (the check fold_batchnorm's axis is)
                t = node.test
                out.append(Mutant(rel, t.lineno, "delete", text(t), "True", span(t), fn.name))
                for i, (operand, neutral) in enumerate(_operands(t, negated=True), 1):
                    out.append(Mutant(rel, operand.lineno, f"drop {i}", text(operand), neutral, span(operand),
                                      fn.name))
                continue
            if not isinstance(node, ast.If) or node.orelse:
                continue
            bails = _bails_out(node.body)
            if not bails and not _offers(node.body):
                continue
            t = node.test
            out.append(Mutant(rel, t.lineno, "delete", text(t), "False" if bails else "True", span(t), fn.name))
            # A positive guard fires (offers) when its condition is true: the polarity of a `not` bail-out.
            for i, (operand, neutral) in enumerate(_operands(t, negated=not bails), 1):
                out.append(Mutant(rel, operand.lineno, f"drop {i}", text(operand), neutral, span(operand), fn.name))
            if negate:
                out.append(Mutant(rel, t.lineno, "negate", text(t), f"(not ({text(t)}))", span(t), fn.name))
    # A nested function's guards are also walked from its enclosing function: keep each mutant once.
    seen, unique = set(), []
    for m in sorted(out, key=lambda m: (m.span, m.kind)):
        if (m.span, m.kind) not in seen:
            seen.add((m.span, m.kind))
            unique.append(m)
    return unique


def _key(m: Mutant) -> tuple:
    """A mutant's identity across runs: not its line, which edits elsewhere in the file move."""
    return m.file, m.function, m.kind, m.original


def apply(src: str, m: Mutant) -> str:
    """`src` with the expression at `m.span` replaced by `m.replacement` (parenthesised: it may sit anywhere)."""
    lines = src.splitlines(keepends=True)
    l0, c0, l1, c1 = m.span
    # ast columns are UTF-8 byte offsets; the rules files are ASCII in their code, but be exact anyway.
    first, last = lines[l0 - 1].encode(), lines[l1 - 1].encode()
    new = first[:c0].decode() + f"({m.replacement})" + last[c1:].decode()
    mutated = "".join(lines[:l0 - 1]) + new + "".join(lines[l1:])
    ast.parse(mutated)  # a mutant must still be valid Python
    return mutated


def run_tests(workdir: Path, command: str, timeout: float, mutated: str | None = None) -> tuple[str, float]:
    start = time.perf_counter()
    try:
        proc = subprocess.run(f"{sys.executable} -m pytest {command}", shell=True, cwd=workdir,
                              env=_env(workdir), capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", time.perf_counter() - start
    # pytest: 0 all passed, 1 some failed; anything else (collection or usage error) is not a kill, unless the
    # traceback runs through the mutated rules file: the mutant crashed a rule while the tests were collected
    # (test parameters built from the rules' matches), which is the tests noticing it.
    status = {0: "survived", 1: "killed"}.get(proc.returncode, "error")
    if status == "error" and mutated and Path(mutated).as_posix() in (proc.stdout + proc.stderr).decode(
            errors="replace"):
        status = "killed"
    return status, time.perf_counter() - start


def _env(workdir: Path) -> dict:
    import os

    env = dict(os.environ)
    # The copy must shadow the editable install of the working tree (PYTHONPATH precedes its finder).
    env["PYTHONPATH"] = str(workdir) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def make_copy() -> Path:
    """A temporary copy of what the tests need: the package, the tests, the pytest configuration."""
    tmp = Path(tempfile.mkdtemp(prefix="guard_mutants_"))
    for name in ("tvm_rl", "tests"):
        shutil.copytree(ROOT / name, tmp / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "conftest.py"):
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, tmp / name)
    probe = subprocess.run([sys.executable, "-c", "import tvm_rl; print(tvm_rl.__file__)"], cwd=tmp,
                           env=_env(tmp), capture_output=True, text=True)
    if not probe.stdout.strip().startswith(str(tmp)):
        raise SystemExit(f"the copy does not shadow the installed tvm_rl: {probe.stdout or probe.stderr}")
    return tmp


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rule", action="append", default=[], help="a rules file (conv.py); repeatable; default all")
    p.add_argument("--limit", type=int, default=0, help="run at most N mutants (after --skip)")
    p.add_argument("--skip", type=int, default=0, help="skip the first N mutants (to run a long list in parts)")
    p.add_argument("--negate", action="store_true", help="also negate each guard")
    p.add_argument("--tests", default=DEFAULT_TESTS, help="pytest arguments, run in the copy")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per mutant (a timeout is a kill)")
    p.add_argument("--jobs", type=int, default=1, help="mutants run at once (each in its own copy)")
    p.add_argument("--allow-dirty", action="store_true",
                   help="run although the rules have uncommitted changes (after reading `git diff`)")
    p.add_argument("--survivors", action="store_true",
                   help="run only the mutants not killed in the --json file (merging the results into it)")
    p.add_argument("--list", action="store_true", help="list the mutants and exit")
    p.add_argument("--json", default="logs/guard_mutants.json")
    args = p.parse_args(argv)

    # The mutants go into a copy, never the working tree; still, a modified rules file may be a mutant left by
    # an interrupted run of an older tool: look (git diff) before trusting the tree as the unmutated code.
    dirty = subprocess.run(["git", "diff", "--quiet", "--", str(RULES)], cwd=ROOT).returncode != 0
    if dirty and not args.allow_dirty:
        raise SystemExit(f"{RULES} has uncommitted changes (a mutant left behind?): refusing to start")
    files = [ROOT / RULES / r for r in args.rule] if args.rule else sorted((ROOT / RULES).glob("*.py"))
    mutants = [m for f in files for m in find_mutants(f, args.negate)]
    mutants = mutants[args.skip:][:args.limit or None]
    out = ROOT / args.json
    previous: list[Mutant] = []
    if args.survivors:  # re-run only what survived last time (after adding tests); keep the other results
        previous = [Mutant(**{**d, "span": tuple(d["span"])}) for d in jsonfile.read_json(out)["mutants"]]
        again = {_key(m) for m in previous if m.status != "killed"}
        mutants = [m for m in mutants if _key(m) in again]
    elif jsonfile.exists(out) and not args.list:  # results for files not in this run are kept (runs per file add up)
        ran = {m.file for m in mutants}
        previous = [Mutant(**{**d, "span": tuple(d["span"])}) for d in jsonfile.read_json(out)["mutants"]
                    if d["file"] not in ran]
    if args.list:
        for m in mutants:
            print(f"{m.file}:{m.line:<4} {m.function:<24} {m.kind:<7} {m.original}")
        return 0

    copies = [make_copy() for _ in range(max(1, args.jobs))]
    free: queue.Queue[Path] = queue.Queue()
    for c in copies:
        free.put(c)

    lock = threading.Lock()

    def save() -> None:
        """Write every result so far (an interrupted run keeps what it did)."""
        done = {_key(m): m for m in mutants if m.status}
        merged = [done.pop(_key(m), m) for m in previous] + list(done.values())
        with lock:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps({"tests": args.tests, "mutants": [asdict(m) for m in merged]}, indent=1))

    def one(m: Mutant) -> None:
        tmp = free.get()  # a copy no other mutant is using
        target = tmp / m.file
        original = target.read_text()
        try:
            target.write_text(apply(original, m))
            m.status, m.seconds = run_tests(tmp, args.tests, args.timeout, m.file)
        finally:
            target.write_text(original)  # the next mutant in this copy starts from the unmutated file
            free.put(tmp)
        m.explanation = EQUIVALENT.get((Path(m.file).name, m.original), "")
        print(f"{m.file}:{m.line:<4} {m.kind:<7} {m.status:<8} {m.seconds:5.1f} s  {m.original[:70]}"
              + (f"  [equivalent: {m.explanation[:60]}]" if m.explanation else ""), flush=True)
        save()

    try:
        base_status, base_s = run_tests(copies[0], args.tests, args.timeout)
        if base_status != "survived":
            raise SystemExit(f"the tests do not pass on the unmutated copy ({base_status})")
        print(f"{len(mutants)} mutants; unmutated tests pass in {base_s:.0f} s")
        with ThreadPoolExecutor(len(copies)) as pool:
            list(pool.map(one, mutants))
    finally:
        for tmp in copies:
            shutil.rmtree(tmp, ignore_errors=True)

    if previous:  # the summary covers the whole merged list
        mutants = [Mutant(**{**d, "span": tuple(d["span"])}) for d in jsonfile.read_json(out)["mutants"]]
    for m in mutants:  # explanations added since a mutant was run still count
        m.explanation = m.explanation or EQUIVALENT.get((Path(m.file).name, m.original), "")
    survivors = [m for m in mutants if m.status == "survived"]
    unexplained = [m for m in survivors if not m.explanation]
    errors = [m for m in mutants if m.status == "error"]
    print(f"\n{len(mutants)} mutants of {len({(m.file, m.span) for m in mutants if m.kind == 'delete'})} guards: "
          f"{sum(m.status in ('killed', 'timeout') for m in mutants)} killed, {len(survivors)} survived "
          f"({len(survivors) - len(unexplained)} explained as equivalent), {len(errors)} errors")
    for m in unexplained:
        print(f"  SURVIVOR {m.file}:{m.line} ({m.function}) {m.kind}: {m.original}")
    out.write_text(json.dumps({"tests": args.tests, "mutants": [asdict(m) for m in mutants]}, indent=1))
    print(f"wrote {args.json}")
    return 1 if unexplained or errors else 0


if __name__ == "__main__":
    sys.exit(main())
