"""Fork safety, as CUDA: a child forked after the device was initialised cannot use it
(CUDA's error, ``_is_in_bad_fork`` true), a child forked before can, DataLoader workers
forked from a training process keep working, and spawned children can use the device.

Each scenario runs as a script in a fresh process (the parent's device state is part of
the scenario), and every wait on a child is bounded, so a hang fails instead of blocking.
"""

import ast
import inspect
import json
import sys
import textwrap

import pytest
import torch

# Starts `target(queue, *args)` in a child of the given start method and returns what it
# puts on the queue; bounded: a child that hangs is killed and reported.
_HARNESS = '''
import json, multiprocessing as mp, sys
import torch
import openreg

def run_child(method, target, *args, timeout=90):
    ctx = mp.get_context(method)
    q = ctx.Queue()
    p = ctx.Process(target=target, args=(q,) + args)
    p.start()
    try:
        return q.get(timeout=timeout)
    except Exception as e:
        return {"harness_error": f"no answer from the {method} child: {type(e).__name__} {e}"}
    finally:
        p.join(timeout)
        if p.is_alive():
            p.kill()
            p.join(5)

def report(obj):
    print("RESULT " + json.dumps(obj))
'''


def _run_scenario(tmp_path, run_command, describe, body):
    script = tmp_path / "scenario.py"
    script.write_text(_HARNESS + textwrap.dedent(body))
    proc = run_command([sys.executable, str(script)])
    assert proc.returncode == 0, describe(proc)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert len(lines) == 1, describe(proc)
    result = json.loads(lines[0][len("RESULT ") :])
    assert "harness_error" not in json.dumps(result), describe(proc)
    return result


def _cuda_bad_fork_message():
    """CUDA's text for a forked child (the string literal in torch.cuda._lazy_init)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(torch.cuda._lazy_init)))
    found = [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "forked subprocess" in node.value
    ]
    assert len(found) == 1, found
    return found[0]


def test_message_follows_cuda():
    # The reference the scenarios compare with; checks that it was found as expected.
    assert _cuda_bad_fork_message().startswith("Cannot re-initialize CUDA in forked subprocess.")


def test_child_forked_after_init_cannot_use_the_device(tmp_path, run_command, describe):
    result = _run_scenario(
        tmp_path,
        run_command,
        describe,
        """
        x = torch.arange(6.0, device="openreg")  # initialises the device

        def child(q):
            out = {"bad_fork": torch.openreg._is_in_bad_fork(), "initialized": torch.openreg.is_initialized()}
            touches = {
                "op on the parent's tensor": lambda: x + 1,
                "new tensor": lambda: torch.ones(2, device="openreg"),
                "lazy_init": torch.openreg._lazy_init,
                "init": torch.openreg.init,
                "get_device_properties": torch.openreg.get_device_properties,
            }
            for name, touch in touches.items():
                try:
                    touch()
                    out[name] = None
                except RuntimeError as e:
                    out[name] = str(e)
            # torch.manual_seed seeds every device not in a bad fork: it must skip this one.
            try:
                torch.manual_seed(0)
                out["torch.manual_seed"] = None
            except RuntimeError as e:
                out["torch.manual_seed"] = str(e)
            q.put(out)

        result = run_child("fork", child)
        # The parent is untouched by its child's fate.
        result["parent_bad_fork"] = torch.openreg._is_in_bad_fork()
        result["parent_after"] = (x + 1).cpu().tolist()
        report(result)
        """,
    )
    expected = "openreg: " + _cuda_bad_fork_message().replace("CUDA", "openreg")
    assert result["bad_fork"] is True
    assert result["initialized"] is False
    for touch in ("op on the parent's tensor", "new tensor", "lazy_init", "init", "get_device_properties"):
        assert result[touch] == expected, (touch, result[touch])
    assert result["torch.manual_seed"] is None
    assert result["parent_bad_fork"] is False
    assert result["parent_after"] == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]


def test_bad_fork_child_exits_cleanly(tmp_path, run_command, describe):
    # A plain os.fork() child that ends normally runs the atexit hooks, openreg's
    # included (_autograd_exit): they must leave a device they may not use alone.
    result = _run_scenario(
        tmp_path,
        run_command,
        describe,
        """
        import os, time
        x = torch.ones(4, device="openreg", requires_grad=True)
        (x * 2).sum().backward()
        pid = os.fork()
        if pid == 0:
            sys.exit(0)  # not os._exit: atexit hooks run
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.05)
        else:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            status = None
        report({"status": status if status is None else os.waitstatus_to_exitcode(status)})
        """,
    )
    assert result["status"] == 0


def test_child_forked_before_init_can_use_the_device(tmp_path, run_command, describe):
    result = _run_scenario(
        tmp_path,
        run_command,
        describe,
        """
        assert not torch.openreg.is_initialized()

        def child(q):
            out = {"bad_fork": torch.openreg._is_in_bad_fork()}
            openreg.reset_stats()
            a = torch.arange(12.0).reshape(3, 4)
            out["mm"] = (a.to("openreg") @ a.t().to("openreg")).cpu().tolist()
            out["expected"] = (a @ a.t()).tolist()
            out["chain"] = openreg.info()["chain"]  # engines loaded in the child itself
            out["served"] = sorted({e for per in openreg.stats().values() for e in per})
            q.put(out)

        result = run_child("fork", child)
        result["parent_initialized_after"] = torch.openreg.is_initialized()
        report(result)
        """,
    )
    assert result["bad_fork"] is False
    assert result["mm"] == result["expected"]
    assert result["chain"], result
    assert set(result["served"]) & set(result["chain"]), result
    assert result["parent_initialized_after"] is False


def test_dataloader_fork_workers_feed_training(tmp_path, run_command, describe):
    result = _run_scenario(
        tmp_path,
        run_command,
        describe,
        """
        import torch.nn as nn
        from torch.utils.data import DataLoader, Dataset

        class Digits(Dataset):
            # CPU work per item, and whether the process serving it is in a bad fork.
            def __init__(self):
                g = torch.Generator().manual_seed(1)
                self.x = torch.randn(96, 16, generator=g)
                self.y = torch.randint(0, 4, (96,), generator=g)

            def __len__(self):
                return len(self.x)

            def __getitem__(self, i):
                x = (self.x[i] - self.x[i].mean()) / (self.x[i].std() + 1e-5)
                return x, self.y[i], torch.tensor(torch.openreg._is_in_bad_fork())

        torch.manual_seed(0)
        init = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).state_dict()

        def train(num_workers):
            model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
            model.load_state_dict(init)
            model.to("openreg")  # the device is in use before the workers fork
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            extra = {"multiprocessing_context": "fork", "timeout": 60} if num_workers else {}
            loader = DataLoader(Digits(), batch_size=16, shuffle=True, num_workers=num_workers,
                                generator=torch.Generator().manual_seed(2), **extra)
            batches, losses, bad_fork = [], [], set()
            for epoch in range(2):
                for x, y, flag in loader:
                    batches.append(x.tolist())
                    bad_fork.update(flag.tolist())
                    opt.zero_grad()
                    loss = nn.functional.cross_entropy(model(x.to("openreg")), y.to("openreg"))
                    loss.backward()
                    opt.step()
                    losses.append(loss.item())
            return {"batches": batches, "losses": losses, "bad_fork": sorted(bad_fork)}

        report({"inline": train(0), "workers": train(2)})
        """,
    )
    inline, workers = result["inline"], result["workers"]
    assert inline["bad_fork"] == [False]
    assert workers["bad_fork"] == [True]  # the workers really were bad-fork children
    assert len(workers["batches"]) == len(inline["batches"]) == 12
    assert workers["batches"] == inline["batches"]
    assert workers["losses"] == inline["losses"]


def test_spawned_child_can_use_the_device(tmp_path, run_command, describe):
    result = _run_scenario(
        tmp_path,
        run_command,
        describe,
        """
        def child(q, a):
            out = {"bad_fork": torch.openreg._is_in_bad_fork()}
            out["sum"] = (a.to("openreg") * 3).sum(dim=0).cpu().tolist()
            q.put(out)

        if __name__ == "__main__":
            a = torch.arange(8.0).reshape(4, 2)
            (a.to("openreg") + 1).cpu()  # the parent has initialised the device
            result = run_child("spawn", child, a)
            result["expected"] = (a * 3).sum(dim=0).tolist()
            report(result)
        """,
    )
    assert result["bad_fork"] is False
    assert result["sum"] == result["expected"]
