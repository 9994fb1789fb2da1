"""Command-line checks shared by the benchmarks (models.py, async_step.py, overhead.py)."""


def thread_counts(parser, text):
    """--threads "1,2" as [1, 2]; a clear parser error otherwise."""
    try:
        counts = [int(t) for t in text.split(",")]
    except ValueError:
        parser.error(f"--threads: expected comma-separated integers, got {text!r}")
    if not counts or min(counts) < 1:
        parser.error("--threads: every count must be >= 1")
    return counts


def step_counts(parser, args, rounds, steps, warmup):
    """Fills --rounds/--steps/--warmup left unset with (quick, full) defaults and checks them."""
    pick = 0 if args.quick else 1
    args.rounds = args.rounds if args.rounds is not None else rounds[pick]
    args.steps = args.steps if args.steps is not None else steps[pick]
    args.warmup = args.warmup if args.warmup is not None else warmup[pick]
    if args.rounds < 1 or args.steps < 1 or args.warmup < 0:
        parser.error("--rounds and --steps must be >= 1, --warmup >= 0")
