"""Per model family, on one engine: how far the device's float32 training step is
from CPU, how much of it the engine serves itself, and which ops fall back.

    python tests/python/models/report.py --engine onednn [--case gpt2 ...] [--markdown]

Runs the float32 step of every case of the suite (the CASES of each test_*.py
here) once, checks it as the suite does, and prints one row per case:
- max rel grad diff: the largest max|device - CPU| / max|CPU| over the gradients
  well above their float32 rounding noise (the suite allows compare.RTOL_FP32);
- err/tol: the largest ratio of error to the suite's tolerance, all gradients;
- bf16 diff: under bf16 autocast, the largest ||device - CPU|| / ||CPU|| over the
  gradients CPU's bf16 run computes to within compare.RTOL_BF16 of its float32 run;
- served: the share of the step's op calls (forward, backward, AdamW step) that the
  engine ran itself; the rest went down the chain (aten_ref) or to the host;
- falls back: the ops of the step that another engine (or the host) ran, with counts.
A case whose check fails prints FAIL and the reason instead of the figures (a
failed bf16 check: FAIL in its column, the reason on stderr); the exit status is
then 1.
"""

import argparse
import contextlib
import glob
import importlib
import os
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))


def _cases():
    sys.path.insert(0, HERE)
    cases = []
    for path in sorted(glob.glob(os.path.join(HERE, "test_*.py"))):
        module = importlib.import_module(os.path.splitext(os.path.basename(path))[0])
        cases.extend(module.CASES)
    return cases


class StatsWindow:
    """Adds up openreg.stats() over the windows it is entered for."""

    def __init__(self, openreg):
        self.openreg = openreg
        self.calls = {}  # (op, engine) -> calls

    @contextlib.contextmanager
    def __call__(self):
        before = self.openreg.stats()
        yield
        for op, per_engine in self.openreg.stats().items():
            for engine, n in per_engine.items():
                n -= before.get(op, {}).get(engine, 0)
                if n:
                    self.calls[(op, engine)] = self.calls.get((op, engine), 0) + n


def _row(case, openreg, compare, engine):
    window = StatsWindow(openreg)
    try:
        summary = compare.check_train_step(case, window=window)
    except Exception as exc:  # a failed check or an op error: report it, go on
        lines = [line for line in str(exc).splitlines() if line.strip()] or [traceback.format_exc(limit=1)]
        return {"name": case.name, "fail": f"{type(exc).__name__}: {lines[0][:160]}"}
    try:
        bf16 = f"{compare.check_bf16_autocast(case)['max_normwise_grad_diff']:.2e}"
    except Exception as exc:
        bf16 = "FAIL"
        print(f"{case.name}: bf16 autocast FAIL: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}",
              file=sys.stderr)
    total = sum(window.calls.values())
    served = sum(n for (op, e), n in window.calls.items() if e == engine)
    others = {}
    for (op, e), n in sorted(window.calls.items()):
        if e != engine:
            others[f"{op.replace('aten::', '')}@{e}"] = n
    return {"name": case.name, "rel": summary["max_rel_grad_diff"], "worst": summary["worst"],
            "bf16": bf16, "served": served / total if total else 0.0, "calls": total, "others": others}


def _plain(cells):
    name, rel, worst, bf16, served, calls, others = cells
    print(f"{name:26} {rel:>17} {worst:>8} {bf16:>9} {served:>7} {calls:>6}  {others}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", help="engine name or path (sets OPENREG_ENGINE); default: inherited / built-in")
    parser.add_argument("--case", action="append", help="only these cases (repeatable)")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = parser.parse_args(argv)
    if args.engine:
        os.environ["OPENREG_ENGINE"] = args.engine

    import torch
    import openreg

    torch.ones(1, device="openreg")
    engine = openreg.info()["chain"][0]
    import compare

    cases = [c for c in _cases() if not args.case or c.name in args.case]
    print(f"engine: {engine} (chain {' > '.join(openreg.info()['chain'])}), torch {torch.__version__}")
    header = ["case", "max rel grad diff", "err/tol", "bf16 diff", "served", "calls", "falls back (op@engine: calls)"]
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
    else:
        _plain(header)
    failures = 0
    for case in cases:
        r = _row(case, openreg, compare, engine)
        if "fail" in r:
            failures += 1
            cells = [r["name"], "FAIL", "", "", "", "", r["fail"]]
        else:
            failures += r["bf16"] == "FAIL"
            others = ", ".join(f"{k}: {v}" for k, v in r["others"].items()) or "-"
            cells = [r["name"], f"{r['rel']:.2e}", f"{r['worst'][0]:.3f}", r["bf16"], f"{r['served']:.1%}",
                     str(r["calls"]), others]
        if args.markdown:
            print("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        else:
            _plain(cells)
    print(f"{len(cases) - failures}/{len(cases)} cases match CPU (float32 step and bf16 autocast)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
