"""A fuzzer for the rewrite rules: random small Relax graphs, random rewrite sequences, numerical checks.

`random_graph(seed)` builds a well-formed `main` (static shapes, float32 or float16) with `GraphGen`, which draws
motifs of the operators the rules touch (`fuzz_motifs` and its per-kind modules). The motifs are chosen to make
rules *match* (sibling convolutions and matmuls on one input, batch_norm after conv2d, exported attention chains,
x * 1, permute chains, concats of activations, ...) and, now and then, to set the traps the rules must refuse (a
second reader, a broadcasting constant, a training batch_norm, a gelu before max pooling, a dtype change).

`fuzz_example` then walks random rewrite sequences from each graph, picking (rule, match) pairs from
`enumerate_candidates`, and checks every graph it reaches against the original on random inputs, each
output to a tolerance relative to its own scale; all of one graph's variants are compiled in one build
(`verify.run_variants`), which is the expensive part.

    python -m tests.support.fuzz --examples 200 --seed 1 [--steps 4]

prints progress and a per-family coverage table, and exits non-zero after printing a reproducer for any
rewrite that changed a result.
"""
from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import tvm
import tvm_ffi
from tvm import relax

from tvm_rl import measure
from tvm_rl.errors import MismatchError
from tvm_rl.graph.candidates import enumerate_candidates
from tvm_rl.graph.rules import Match, all_rules, rule_names
from tvm_rl.graph.verify import random_inputs, run_variants

from .fuzz_motifs import MOTIFS, _Tensor
from .fuzz_motifs_any import AnyMotifs
from .fuzz_motifs_image import ImageMotifs
from .fuzz_motifs_sequence import SequenceMotifs
from .fuzz_motifs_transformer import TransformerMotifs

# Rewrites reorder float arithmetic (merged convolutions, folded constants); float16 keeps ~3 digits.
TOLERANCES = {"float32": (1e-4, 1e-4), "float16": (2e-2, 2e-2)}


class GraphGen(ImageMotifs, SequenceMotifs, AnyMotifs, TransformerMotifs):
    """Builds one random graph: a few motifs applied to tensors from a growing pool.

    Each motif takes tensors from the pool (inputs or earlier results) and adds its results to it. The
    tensors nobody reads become the outputs, so no binding is dead code.
    """

    MOTIFS = MOTIFS

    def build(self, n_motifs: int, theme: str) -> tvm.IRModule:
        rng = self.rng
        shapes = []
        if theme in ("image", "mixed"):
            # Mostly 4-9 pixels; now and then the 1-3 pixel maps of a network's last stages.
            h, w = (int(rng.integers(1, 4)) if self.chance(0.15) else int(rng.integers(4, 10)) for _ in range(2))
            shapes.append((int(rng.integers(1, 3)), self.choice([2, 3, 4, 4, 6, 8]), h, w))
        if theme in ("sequence", "mixed"):
            d = self.choice([4, 6, 8, 8])
            if self.chance(0.75):
                shapes.append((int(rng.integers(1, 3)), int(rng.integers(2, 7)), d))
            else:
                shapes.append((int(rng.integers(2, 6)), d))
        bb = relax.BlockBuilder()
        params = [relax.Var(f"x{i}", relax.TensorType(list(s), self.dtype)) for i, s in enumerate(shapes)]
        with bb.function("main", params):
            with bb.dataflow():
                self._emit = bb.emit
                self.pool = [_Tensor(p, tuple(s)) for p, s in zip(params, shapes)]
                names = list(self.MOTIFS)
                for _ in range(n_motifs):
                    kinds = {"any"} | ({"image"} if self.pick(4) else set()) | \
                        ({"sequence"} if self.pick((2, 3)) else set())
                    usable = [m for m in names if self.MOTIFS[m][1] in kinds]
                    w = np.array([self.MOTIFS[m][0] for m in usable])
                    getattr(self, usable[int(rng.choice(len(usable), p=w / w.sum()))])()
                param_names = {p.name for p in params}
                outs = [t for t in self.pool if self.reads[t.var.name] == 0 and t.var.name not in param_names]
                outs += [t for t in self.extra_outputs if t not in outs]
                if not outs:  # every motif bailed out: still compute something
                    outs = [self.act(self.pool[0], "relu")]
                result = outs[0].var if len(outs) == 1 else relax.Tuple([t.var for t in outs])
                gv = bb.emit_output(result)
            bb.emit_func_output(gv)
        return bb.get()


def random_graph(seed: int | Sequence[int] | np.random.Generator, dtype: str | None = None,
                 n_motifs: int | None = None, theme: str | None = None) -> tvm.IRModule:
    """A random well-formed graph (`main` only, static shapes) biased towards places where rules match.

    dtype: float32 (most graphs) or float16; theme: "image" (NCHW convolutions), "sequence" (matmuls,
    attention) or "mixed"; all drawn from `seed` unless given.
    """
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    dtype = dtype or ("float16" if rng.random() < 0.25 else "float32")
    theme = theme or ["image", "sequence", "mixed"][int(rng.choice(3, p=[0.4, 0.35, 0.25]))]
    n_motifs = n_motifs or int(rng.integers(2, 6))
    return GraphGen(rng, dtype).build(n_motifs, theme)


def graph_dtype(mod: tvm.IRModule) -> str:
    """The dtype of `main`'s first parameter (a fuzz graph is all one float type, bar dtype hops)."""
    return str(mod["main"].params[0].ty.dtype)


def graphs(**kwargs):
    """A hypothesis strategy of random graphs (one integer seed drawn per graph; shrinks towards seed 0)."""
    from hypothesis import strategies as st

    return st.integers(0, 2**32 - 1).map(lambda s: random_graph(s, **kwargs))


# ------------------------------------------------------------------------------------ rewrite sequences


@dataclass
class Failure:
    """A rewritten graph that differs from its original (or failed to rewrite or to build)."""

    seed: int
    example: int
    original: tvm.IRModule = field(repr=False)
    matches: list[Match]
    reason: str
    options: str = ""  # the walk options (--walks ...) the example ran with, for the reproducer

    def report(self) -> str:
        steps = "\n".join(f"  {i + 1}. {m!r}" for i, m in enumerate(self.matches)) or "  none"
        # A find that raised broke on the graph the rewrites lead to; otherwise the last rewrite broke it.
        which = "leading to the graph it failed on" if "find raised" in self.reason else "the last one broke it"
        return (f"FAILED example {self.example} (seed {self.seed}): {self.reason}\n"
                f"reproduce: python -m tests.support.fuzz --seed {self.seed} --first {self.example} --examples 1"
                f"{self.options}\n"
                f"rewrites, in order ({which}):\n{steps}\n"
                f"original graph:\n{self.original.script()}")


@dataclass
class Coverage:
    """Per rule family: matches offered, rewrites applied (walk steps) and rewritten graphs checked whose
    last rewrite was of that family; plus totals."""

    offered: Counter = field(default_factory=Counter)
    applied: Counter = field(default_factory=Counter)
    checked: Counter = field(default_factory=Counter)
    graphs: int = 0
    examples: int = 0
    no_match: int = 0
    builds: int = 0
    unbuildable: list[str] = field(default_factory=list)

    def merge(self, other: "Coverage") -> None:
        for mine, theirs in ((self.offered, other.offered), (self.applied, other.applied),
                             (self.checked, other.checked)):
            mine.update(theirs)
        self.graphs += other.graphs
        self.examples += other.examples
        self.no_match += other.no_match
        self.builds += other.builds
        self.unbuildable += other.unbuildable

    def families(self) -> int:
        """Rule families with at least one rewritten graph checked."""
        return sum(1 for v in self.checked.values() if v)

    def table(self) -> str:
        rows = [f"{'family':28s} {'offered':>8s} {'applied':>8s} {'checked':>8s}"]
        for name in rule_names():
            rows.append(f"{name:28s} {self.offered[name]:8d} {self.applied[name]:8d} {self.checked[name]:8d}")
        rows.append(f"{'total':28s} {sum(self.offered.values()):8d} {sum(self.applied.values()):8d} "
                    f"{sum(self.checked.values()):8d}")
        rows.append(f"{self.graphs} rewritten graphs checked in {self.builds} builds over {self.examples} "
                    f"random graphs ({self.no_match} with no match); {self.families()} of {len(rule_names())} "
                    "families exercised")
        if self.unbuildable:
            rows.append(f"{len(self.unbuildable)} random graphs skipped, their original does not build:")
            rows += [f"  {line}" for line in self.unbuildable]
        return "\n".join(rows)


class RewriteCrash(RuntimeError):
    """A rule raised while rewriting a match it offered (the path ends with that match), or while looking
    for matches (`what` names the family; the path leads to the graph it looked at)."""

    def __init__(self, path: list[Match], err: BaseException, what: str = "the rewrite raised"):
        super().__init__(_error_line(err))
        self.path = path
        self.what = what


def _candidates(mod: tvm.IRModule, path: list[Match]):
    """`enumerate_candidates(mod)`; when a rewrite raises, a RewriteCrash naming the match that did."""
    try:
        return enumerate_candidates(mod)
    except Exception as err:  # noqa: BLE001  (RuleError or a TVM type error from a bad rewrite)
        for rule in all_rules():
            try:
                matches = rule.matches(mod)
            except Exception as culprit:  # noqa: BLE001  (a bug in the family's find)
                raise RewriteCrash(path, culprit, f"{rule.name}'s find raised") from culprit
            for match in matches:
                try:
                    rule.apply(mod, match)
                except Exception as culprit:  # noqa: BLE001
                    raise RewriteCrash(path + [match], culprit) from culprit
        raise RewriteCrash(path, err) from err


def _walks(mod: tvm.IRModule, rng: np.random.Generator, walks: int, steps: int, cov: Coverage
           ) -> list[tuple[list[Match], tvm.IRModule]]:
    """Random rewrite sequences from `mod`: each step picks a family uniformly among those offering a
    candidate (so frequent families do not crowd out rare ones), then one of its candidates.

    Returns every distinct graph reached with the matches leading to it. The first step of all walks
    shares one candidate set, and every candidate in it is kept (they are all checked anyway).
    """
    seen: set[int] = {tvm_ffi.structural_hash(mod)}
    out: list[tuple[list[Match], tvm.IRModule]] = []

    def keep(path: list[Match], new: tvm.IRModule) -> None:
        key = tvm_ffi.structural_hash(new)
        if key not in seen:
            seen.add(key)
            out.append((path, new))
            cov.checked[path[-1].rule] += 1

    first = _candidates(mod, [])
    for cand in first:
        cov.offered[cand.rule.name] += 1
        keep([cand.match], cand.mod)
    if not len(first):
        return out
    for _ in range(walks):
        cands, path, cur = first, [], mod
        for step in range(steps):
            if step:
                cands = _candidates(cur, path)
                for cand in cands:
                    cov.offered[cand.rule.name] += 1
            if not len(cands):
                break
            families = sorted({c.rule.name for c in cands}, key=rule_names().index)
            family = families[int(rng.integers(len(families)))]
            options = [c for c in cands if c.rule.name == family]
            cand = options[int(rng.integers(len(options)))]
            cov.applied[family] += 1
            path, cur = path + [cand.match], cand.mod
            if step:
                keep(path, cur)
    return out


class Unbuildable(RuntimeError):
    """The original graph itself does not build (a TVM limitation the generator should steer clear of)."""


def _error_line(err: BaseException) -> str:
    """The telling line of an error (TVM's messages end in a script dump or a metadata note)."""
    cause = err.__cause__ or err
    lines = [ln.strip() for ln in str(cause).splitlines() if ln.strip() and not ln.strip().startswith("#")]
    text = next((ln for ln in reversed(lines) if "Error" in ln or "must" in ln), lines[-1] if lines else "")
    return f"{type(cause).__name__}: {text[:400]}"


def compare_outputs(original: tvm.IRModule, variants: dict[str, tvm.IRModule], inputs: Sequence[np.ndarray],
                    rtol: float, atol: float) -> dict[str, measure.Comparison]:
    """Like `verify.compare_variants` (one build for all variants), but with `atol` relative to each output's
    own largest magnitude: fuzz graphs return several outputs of very different scales, and one shared
    scale would let a wrong small output pass."""
    outs = run_variants(original, variants, inputs)
    ref = outs.pop("original")
    scales = [max(float(np.max(np.abs(r.astype(np.float64)))) if r.size else 0.0, 1e-30) for r in ref]
    results = {}
    for key, out in outs.items():
        if len(out) != len(ref):
            raise MismatchError(f"{len(out)} outputs, the original has {len(ref)}")
        per = [measure.compare([o], [r], rtol=rtol, atol=atol * sc) for o, r, sc in zip(out, ref, scales)]
        worst = next((i for i, c in enumerate(per) if not c.ok), int(np.argmax([c.max_abs_err for c in per])))
        results[key] = measure.Comparison(max(c.max_abs_err for c in per), max(c.max_rel_err for c in per),
                                          worst, all(c.ok for c in per))
    return results


def _check(mod: tvm.IRModule, variants: list[tuple[list[Match], tvm.IRModule]], seed: int, cov: Coverage
           ) -> list[tuple[list[Match], str]]:
    """Compare every variant with `mod` (one build; on a build error, one build per variant to find it)."""
    dtype = graph_dtype(mod)
    rtol, atol = TOLERANCES.get(dtype, TOLERANCES["float16"])
    inputs = random_inputs(mod, seed)
    bad = []
    try:
        cov.builds += 1
        results = compare_outputs(mod, {str(i): v for i, (_, v) in enumerate(variants)}, inputs, rtol, atol)
    except Exception:  # noqa: BLE001  (a build or shape error somewhere: find the variant that has it)
        try:
            cov.builds += 1
            compare_outputs(mod, {}, inputs, rtol, atol)
        except Exception as err:  # noqa: BLE001
            raise Unbuildable(_error_line(err)) from err
        results = {}
        for i, (path, v) in enumerate(variants):
            try:
                cov.builds += 1
                results[str(i)] = compare_outputs(mod, {"v": v}, inputs, rtol, atol)["v"]
            except Exception as err:  # noqa: BLE001
                bad.append((path, _error_line(err)))
    for i, (path, _) in enumerate(variants):
        c = results.get(str(i))
        if c is not None and not c.ok:
            bad.append((path, f"max abs error {c.max_abs_err:.3g} (max rel {c.max_rel_err:.3g}) in output "
                              f"{c.worst_output}, {dtype} tolerance rtol={rtol:g} atol={atol:g}*(output scale)"))
    return bad


def _spread(variants: list[tuple[list[Match], tvm.IRModule]], n: int) -> set[int]:
    """Indices of `n` variants taken round-robin over the family of their last rewrite, deepest first
    within a family: a graph with eight constant transposes should not spend the build on them alone."""
    by_family: dict[str, list[int]] = {}
    for i, (path, _) in enumerate(variants):
        by_family.setdefault(path[-1].rule, []).append(i)
    queues = [sorted(idx, key=lambda i: (-len(variants[i][0]), i)) for _, idx in sorted(by_family.items())]
    keep: set[int] = set()
    while len(keep) < n:
        for q in queues:
            if q and len(keep) < n:
                keep.add(q.pop(0))
    return keep


def fuzz_example(seed: int, example: int, walks: int = 3, steps: int = 4, max_variants: int = 24
                 ) -> tuple[Coverage, list[Failure]]:
    """Fuzz one random graph: random rewrite walks from it, every graph reached checked numerically.

    The graph and the walks depend on (seed, example) only, so any example re-runs on its own.
    `max_variants` bounds the graphs checked (and so the build time) per example.
    """
    rng = np.random.default_rng([seed, example])
    options = f" --walks {walks} --steps {steps} --max-variants {max_variants}"
    cov = Coverage(examples=1)
    try:
        mod = random_graph(rng)
    except Exception as err:  # noqa: BLE001  (the generator itself is wrong: never hide it)
        raise RuntimeError(f"generator failed on seed {seed} example {example}: {err}") from err
    failures = []
    try:
        variants = _walks(mod, rng, walks, steps, cov)
    except RewriteCrash as err:
        return cov, [Failure(seed, example, mod, err.path, f"{err.what} {err}", options)]
    if not variants:
        cov.no_match += 1
        return cov, []
    if len(variants) > max_variants:
        keep = _spread(variants, max_variants)
        for i, (path, _) in enumerate(variants):
            if i not in keep:
                cov.checked[path[-1].rule] -= 1
        variants = [v for i, v in enumerate(variants) if i in keep]
    cov.graphs += len(variants)
    try:
        bad = _check(mod, variants, seed * 1000 + example, cov)
    except Unbuildable as err:
        cov.unbuildable.append(f"example {example}: {err}")
        cov.graphs -= len(variants)
        for path, _ in variants:
            cov.checked[path[-1].rule] -= 1
        return cov, []
    # A path extending a failing one fails for the same reason: report the shortest, whose last rewrite
    # is the culprit (every prefix of a walk is checked too).
    bad.sort(key=lambda b: len(b[0]))
    for path, reason in bad:
        if not any(f.matches == path[:len(f.matches)] for f in failures):
            failures.append(Failure(seed, example, mod, path, reason, options))
    return cov, failures


def fuzz(examples: int, seed: int = 0, first: int = 0, walks: int = 3, steps: int = 4,
         max_variants: int = 24, progress: Callable[[str], None] | None = None
         ) -> tuple[Coverage, list[Failure]]:
    """Run `fuzz_example` for examples first .. first + examples - 1; returns the coverage and failures."""
    cov, failures = Coverage(), []
    start = time.perf_counter()
    for i in range(first, first + examples):
        c, f = fuzz_example(seed, i, walks, steps, max_variants)
        cov.merge(c)
        failures += f
        if progress is not None:
            progress(f"[{i - first + 1}/{examples}] example {i}: {c.graphs} graphs checked "
                     f"({', '.join(sorted(k for k, v in c.applied.items() if v)) or 'no rewrite'})"
                     + (f"  {len(f)} FAILED" if f else "")
                     + f"  total {cov.graphs} graphs, {time.perf_counter() - start:.0f} s")
    return cov, failures


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.support.fuzz", description=__doc__.split("\n\n")[0])
    p.add_argument("--examples", type=int, default=100, help="random graphs to fuzz")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--first", type=int, default=0, help="index of the first example (to re-run one)")
    p.add_argument("--steps", type=int, default=4, help="rewrites per walk")
    p.add_argument("--walks", type=int, default=3, help="random walks per graph")
    p.add_argument("--max-variants", type=int, default=24, help="rewritten graphs checked per random graph")
    p.add_argument("--quiet", action="store_true", help="no per-example progress lines")
    args = p.parse_args(argv)
    say = None if args.quiet else (lambda line: print(line, flush=True))
    start = time.perf_counter()
    cov, failures = fuzz(args.examples, args.seed, args.first, args.walks, args.steps, args.max_variants, say)
    print(cov.table())
    print("offered: distinct candidates enumerated on the graphs visited; applied: rewrites the walks took; "
          "checked: rewritten graphs compared whose last rewrite is the family's "
          f"({time.perf_counter() - start:.0f} s)")
    for f in failures:
        print("\n" + f.report())
    if failures:
        print(f"\n{len(failures)} rewritten graphs differ from their original", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
