"""The models bench/models.py, bench/step_ops.py and bench/async_step.py time:
openreg.workloads's (the model suite's families and examples/train.py's digits
CNN), the same ones `python -m openreg tune` measures."""

from openreg.workloads import DESCRIPTIONS, MODELS, Workload, build  # noqa: F401  (re-exported for the benches)
