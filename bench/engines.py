"""Engine benchmark: the same work on native torch CPU and on the openreg device,
side by side in one process, printed as ratios.

    python bench/engines.py --engine onednn           # the full set
    python bench/engines.py --engine eigen --quick    # small sizes, a smoke run

ratio = torch CPU time / openreg time: above 1.0 the device is faster. Each case
alternates CPU and device runs for several rounds and keeps the median of each,
so drifting load on the machine hits both sides alike. The fp32 peak of this
machine is measured in the same run (bench/peak_fp32.c, built on the fly) and
GEMMs are also reported as a share of it.

Cases: GEMM n x n x n, conv2d forward and backward (N=32, C=64, 56x56, 3x3),
a large elementwise add, and one training step of examples/train.py (forward,
backward, Adam). This is a benchmark, not a test: it asserts nothing. Targets
(from the engine issues) are printed next to each ratio; --check exits 1 when
one is missed, for people who want a gate.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# Targets per engine: case kind -> minimum ratio (torch CPU time / openreg time).
TARGETS = {
    "eigen": {"gemm": 0.6, "step": 0.6},
    "onednn": {"gemm": 0.9, "conv": 0.9, "step": 0.85, "gemm_peak": 0.70},
}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--engine", default=None,
                   help="OPENREG_ENGINE for the device (name or path); default: inherit, else auto")
    p.add_argument("--gemm", default=None, help="comma-separated GEMM sizes (default 256,1024,2048,4096)")
    p.add_argument("--quick", action="store_true", help="small sizes and few rounds: checks the script runs")
    p.add_argument("--rounds", type=int, default=None, help="alternating CPU/device rounds per case")
    p.add_argument("--only", default=None, help="comma-separated case kinds: gemm,conv,add,step")
    p.add_argument("--check", action="store_true", help="exit 1 if a target of the engine is missed")
    p.add_argument("--markdown", action="store_true", help="print the table as markdown")
    return p.parse_args()


def measure_peak(threads):
    """GFLOP/s of fp32 FMA on 1 and `threads` threads, or None if no compiler."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    with tempfile.TemporaryDirectory() as d:
        exe = os.path.join(d, "peak")
        r = subprocess.run([cc, "-O3", "-march=native", "-pthread", os.path.join(HERE, "peak_fp32.c"), "-o", exe],
                           capture_output=True, text=True)
        if r.returncode != 0:
            return None
        out = subprocess.run([exe, str(threads), "0.3"], capture_output=True, text=True, check=True).stdout.split()
    return {"bits": int(out[0]), "one": float(out[1]), "all": float(out[2])}


def timed(fn, sync, reps):
    sync(fn())
    start = time.perf_counter()
    r = None
    for _ in range(reps):
        r = fn()
    sync(r)
    return (time.perf_counter() - start) / reps


def side_by_side(make, rounds, reps):
    """make(device) -> (fn, sync). Returns median seconds per call (cpu, openreg)."""
    cpu_fn, cpu_sync = make("cpu")
    dev_fn, dev_sync = make("openreg")
    timed(cpu_fn, cpu_sync, 1)
    timed(dev_fn, dev_sync, 1)
    cpu, dev = [], []
    for _ in range(rounds):
        cpu.append(timed(cpu_fn, cpu_sync, reps))
        dev.append(timed(dev_fn, dev_sync, reps))
    return statistics.median(cpu), statistics.median(dev)


def main():
    args = parse_args()
    if args.engine:
        os.environ["OPENREG_ENGINE"] = args.engine
    import torch
    import torch.nn.functional as F
    import openreg  # noqa: F401  (registers the device)

    from train_step import make_train_step

    torch.ones(1, device="openreg")  # loads the engines
    info = openreg.info()
    engine = info["chain"][0]
    targets = TARGETS.get(engine, {})
    threads = torch.get_num_threads()
    rounds = args.rounds or (2 if args.quick else 5)
    only = set(args.only.split(",")) if args.only else {"gemm", "conv", "add", "step"}
    gemm_sizes = [int(s) for s in args.gemm.split(",")] if args.gemm else (
        [64, 128] if args.quick else [256, 1024, 2048, 4096])

    def sync_tensor(t):
        if t.device.type != "cpu":
            t.view(-1)[:1].cpu()  # a copy to the host waits for the queued work

    rows = []

    def add_row(kind, name, work, cpu, dev, flops=None):
        rows.append({"kind": kind, "case": name, "cpu_ms": cpu * 1e3, "dev_ms": dev * 1e3,
                     "ratio": cpu / dev, "flops": flops})

    if "gemm" in only:
        for n in gemm_sizes:
            def make(device, n=n):
                g = torch.Generator().manual_seed(n)
                a = torch.randn(n, n, generator=g).to(device)
                b = torch.randn(n, n, generator=g).to(device)
                return (lambda: torch.mm(a, b)), sync_tensor
            reps = max(1, int(2e9 / (2 * n ** 3)))
            cpu, dev = side_by_side(make, rounds, min(reps, 50))
            add_row("gemm", f"GEMM {n}x{n}x{n} fp32", None, cpu, dev, flops=2.0 * n ** 3)

    if "conv" in only:
        shape = (4, 16, 14, 14) if args.quick else (32, 64, 56, 56)
        def make_fwd(device):
            g = torch.Generator().manual_seed(1)
            x = torch.randn(*shape, generator=g).to(device)
            w = torch.randn(shape[1], shape[1], 3, 3, generator=g).mul_(0.05).to(device)
            return (lambda: F.conv2d(x, w, padding=1)), sync_tensor
        cpu, dev = side_by_side(make_fwd, rounds, 2 if not args.quick else 3)
        add_row("conv", "conv2d fwd N=%d C=%d %dx%d 3x3" % shape, None, cpu, dev)

        def make_bwd(device):
            g = torch.Generator().manual_seed(2)
            x = torch.randn(*shape, generator=g).to(device).requires_grad_()
            w = torch.randn(shape[1], shape[1], 3, 3, generator=g).mul_(0.05).to(device).requires_grad_()
            y = F.conv2d(x, w, padding=1)
            gy = torch.randn(y.shape, generator=g).to(device)
            def run():
                gx, gw = torch.autograd.grad(y, (x, w), gy, retain_graph=True)
                return gw
            return run, sync_tensor
        cpu, dev = side_by_side(make_bwd, rounds, 2 if not args.quick else 3)
        add_row("conv", "conv2d bwd (data+weight) same shape", None, cpu, dev)

    if "add" in only:
        n = 1 << (16 if args.quick else 24)
        def make_add(device):
            g = torch.Generator().manual_seed(3)
            a, b = torch.randn(n, generator=g).to(device), torch.randn(n, generator=g).to(device)
            return (lambda: a + b), sync_tensor
        cpu, dev = side_by_side(make_add, rounds, 10)
        add_row("add", f"add {n} fp32", None, cpu, dev)

    if "step" in only:
        def make_step(device):
            step = make_train_step(device)
            for _ in range(3):
                step()
            return step, lambda loss: loss.item()
        cpu, dev = side_by_side(make_step, rounds, 5 if args.quick else 30)
        add_row("step", "training step (examples/train.py, batch 64, Adam)", None, cpu, dev)

    peak = measure_peak(threads) if "gemm" in only and not args.quick else None

    version = next((e["version"] for e in info["engines"] if e["name"] == engine), "?")
    print(f"openreg engine: {engine} {version}; chain: {' -> '.join(info['chain'])}")
    print(f"torch {torch.__version__}, {threads} threads; rounds={rounds} (median of each side)")
    if peak:
        print(f"fp32 peak measured: {peak['one']:.1f} GFLOP/s on 1 thread, {peak['all']:.1f} on {threads} "
              f"({peak['bits']}-bit FMA)")
    missed = []
    header = ["case", "torch CPU ms", "openreg ms", "ratio", "target", "GFLOP/s cpu / openreg", "% of peak"]
    lines = []
    for r in rows:
        t = targets.get(r["kind"])
        target = f">= {t}x" if t else ""
        ok = "" if t is None else ("ok" if r["ratio"] >= t else "MISSED")
        if t is not None and r["ratio"] < t:
            missed.append(r["case"])
        gf = pk = ""
        if r["flops"]:
            gcpu, gdev = r["flops"] / r["cpu_ms"] * 1e-6, r["flops"] / r["dev_ms"] * 1e-6
            gf = f"{gcpu:.0f} / {gdev:.0f}"
            if peak:
                share = gdev / peak["all"]
                pt = targets.get("gemm_peak")
                pk = f"{share * 100:.0f}%" + (f" ({'ok' if share >= pt else 'MISSED'})" if pt else "")
                if pt and share < pt and r["case"] not in missed:
                    missed.append(r["case"] + " (peak)")
        lines.append([r["case"], f"{r['cpu_ms']:.3f}", f"{r['dev_ms']:.3f}", f"{r['ratio']:.2f}x",
                      f"{target} {ok}".strip(), gf, pk])
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for l in lines:
            print("| " + " | ".join(l) + " |")
    else:
        widths = [max(len(h), *(len(l[i]) for l in lines)) if lines else len(h) for i, h in enumerate(header)]
        print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
        for l in lines:
            print("  ".join(c.ljust(w) for c, w in zip(l, widths)))
    if missed:
        print("targets missed: " + "; ".join(missed))
    return 1 if (args.check and missed) else 0


if __name__ == "__main__":
    sys.exit(main())
