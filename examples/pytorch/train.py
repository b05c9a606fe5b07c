"""A tiny DDP training run (PyTorch on the CPU, gloo) for the workload tests: a linear model
learns a fixed linear map from data each rank draws on its own, so only the gradients' average
keeps the ranks' parameters equal.

Started the way a job starts it: by the platform's variables (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT: ``init_method=env://``) or under torchrun (which sets the same for its workers).
Checkpoints go to ``checkpoints/step-<S>.pt`` under the working directory (a relative path:
the task's AIPAAS_WORKDIR, which outlives its restarts); at start every rank takes the newest
step that all ranks have and logs ``rank R resumes at step S (attempt A)``. With ``--out DIR``
each rank writes there what the tests read: ``pid-R-A`` (its pid), ``progress-R-A`` (the last
step it finished), ``final-R`` (its parameters, exactly), ``world-...`` (the world size each
worker saw, under ``--until``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

CHECKPOINTS = Path("checkpoints")
TRUE_MAP = torch.arange(16, dtype=torch.float32) / 16


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--checkpoint-every", type=int, default=25)
    parser.add_argument("--step-seconds", type=float, default=0.0)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--until", type=Path, help="train until this file exists (elastic)")
    args = parser.parse_args()

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    attempt = os.environ.get("AIPAAS_ATTEMPT", "0")
    write(args.out, f"pid-{rank}-{attempt}", str(os.getpid()))
    if args.until is not None:
        write(args.out, f"world-{time.time():.6f}-{rank}", f"{world}")
    print(f"rank {rank} of {world} starts (attempt {attempt})", flush=True)

    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    step = resume(model, optimizer, args.until is None)
    print(f"rank {rank} resumes at step {step} (attempt {attempt})", flush=True)

    data = torch.Generator().manual_seed(1000 + rank)
    while step < args.steps or (args.until is not None and not args.until.exists()):
        x = torch.randn(32, 16, generator=data)
        y = x @ TRUE_MAP + 0.01 * torch.randn(32, generator=data)
        loss = nn.functional.mse_loss(model(x).squeeze(1), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        write(args.out, f"progress-{rank}-{attempt}", str(step))
        if args.until is None and step % args.checkpoint_every == 0:
            save(model, optimizer, step)
        time.sleep(args.step_seconds)
    params = [float(v) for p in model.module.parameters() for v in p.detach().flatten()]
    write(args.out, f"final-{rank}", json.dumps(params))
    print(f"rank {rank} ends at step {step} with loss {loss.item():.6f}", flush=True)
    dist.destroy_process_group()


def resume(model: DistributedDataParallel, optimizer: torch.optim.Optimizer, use: bool) -> int:
    """The newest checkpoint every rank has (an all_reduce of each rank's newest: a rank
    stopped while it wrote may be one behind), loaded; 0 without one."""
    mine = max((int(p.stem.split("-")[1]) for p in CHECKPOINTS.glob("step-*.pt")), default=0)
    newest = torch.tensor([mine if use else 0])
    dist.all_reduce(newest, op=dist.ReduceOp.MIN)
    step = int(newest.item())
    if step:
        state = torch.load(CHECKPOINTS / f"step-{step}.pt")
        model.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    return step


def save(model: DistributedDataParallel, optimizer: torch.optim.Optimizer, step: int) -> None:
    """Written whole, then renamed; the two newest kept (the ranks' newest may differ by one)."""
    CHECKPOINTS.mkdir(exist_ok=True)
    partial = CHECKPOINTS / f".step-{step}.pt.{os.getpid()}"
    torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict()}, partial)
    os.replace(partial, CHECKPOINTS / f"step-{step}.pt")
    kept = sorted(CHECKPOINTS.glob("step-*.pt"), key=lambda p: int(p.stem.split("-")[1]))
    for old in kept[:-2]:
        old.unlink()


def write(out: Path | None, name: str, text: str) -> None:
    if out is None:
        return
    partial = out / f".{name}.{os.getpid()}"
    partial.write_text(text)
    os.replace(partial, out / name)


if __name__ == "__main__":
    main()
