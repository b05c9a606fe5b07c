"""PyTorch Lightning on Slurm: Lightning's own cluster detection (SLURMEnvironment, from
SLURM_NTASKS, SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID and the platform's MASTER_ADDR and
MASTER_PORT) sets up DDP over gloo across the job's tasks, with no launcher of its own. Each
process writes ``OUT/lightning-<global rank>``: the ranks and world size Lightning gave it,
Slurm's variables, and its parameters after a few steps (equal in every rank, if DDP ran)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import lightning as L
import torch
from lightning.fabric.plugins.environments import SLURMEnvironment
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Tiny(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(8, 1)

    def training_step(self, batch: list[torch.Tensor], index: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(self.layer(x).squeeze(1), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main() -> None:
    out = Path(sys.argv[1])
    # Lightning's devices are the processes of a node, its nodes Slurm's: what Slurm says
    devices = int(os.environ["SLURM_NTASKS_PER_NODE"])
    nodes = int(os.environ["SLURM_NNODES"])
    torch.manual_seed(0)
    model = Tiny()
    generator = torch.Generator().manual_seed(int(os.environ["SLURM_PROCID"]))
    x = torch.randn(256, 8, generator=generator)
    data = DataLoader(TensorDataset(x, x.sum(dim=1)), batch_size=32)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=devices,
        num_nodes=nodes,
        strategy="ddp",
        max_steps=20,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        use_distributed_sampler=False,
    )
    trainer.fit(model, data)
    seen = {
        "detected": SLURMEnvironment.detect(),
        "environment": type(trainer.strategy.cluster_environment).__name__,
        "global_rank": trainer.global_rank,
        "world_size": trainer.world_size,
        "local_rank": trainer.local_rank,
        "node_rank": trainer.node_rank,
        "slurm_procid": os.environ["SLURM_PROCID"],
        "slurm_nnodes": os.environ["SLURM_NNODES"],
        "params": [float(v) for p in model.parameters() for v in p.detach().flatten()],
    }
    (out / f"lightning-{trainer.global_rank}").write_text(json.dumps(seen))
    # Leave the process group before the interpreter exits: gloo's threads torn down by the
    # exit now and then abort the process ("terminate called without an active exception",
    # exit code 134) after the work is done.
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
