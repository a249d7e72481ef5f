"""DistributedDataParallel: one run on several processes (GPUs, or CPU processes for the tests).

    torchrun --nproc_per_node=8 -m rmsnorm_repro.train task=transformer data=wmt14 norm=rmsnorm

Where the processes come from:
- torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT in each process;
- a SLURM job started by hydra-submitit-launcher with tasks_per_node > 1 runs the job function once
  per task; submitit's TorchDistributedEnvironment exports the same variables from SLURM's.
Then `process_group(device)` joins the group: nccl on CUDA (each process on cuda:LOCAL_RANK), gloo
on CPU. Without those variables nothing happens and the run is the ordinary one-process run.

How a DDP run matches a one-process run with the same global batch (train.batch_size, or the token
budget): the task gives each rank its shard of the global batch, the per-rank loss is a mean over
its shard, and DDP averages the gradients over ranks. Equal shards make that average the gradient
of the global mean. Token batches shard by sentences, so token counts differ between ranks: the
loop then weighs each rank's mean by its share of the global tokens (`token_weight`, one all-reduce
of a scalar per step), and the average is again the gradient of the global per-token mean.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Iterator

import torch
import torch.distributed as dist

# Ranks other than 0 wait at a barrier while rank 0 evaluates (beam search over a test set can
# take many minutes at paper scale): the collective timeout must outlast that.
TIMEOUT = timedelta(minutes=60)


@dataclass(frozen=True)
class World:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        """Rank 0 writes every file (config, metrics, summary, checkpoints) and logs to wandb."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def export_submitit_environment() -> None:
    """In a submitit job with several tasks (SLURM tasks_per_node > 1), set torchrun's variables."""
    if "RANK" in os.environ or "SUBMITIT_EXECUTOR" not in os.environ:
        return
    from submitit.helpers import TorchDistributedEnvironment

    env = TorchDistributedEnvironment()
    if env.world_size > 1:
        # keep every GPU visible: the device is picked by LOCAL_RANK below, as under torchrun
        env.export(set_cuda_visible_devices=False)


def world_from_environment() -> World:
    if "RANK" not in os.environ:
        return World()
    try:
        return World(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", 0)))
    except (KeyError, ValueError):
        raise RuntimeError("RANK is set but WORLD_SIZE is missing or not a number: start DDP runs with "
                           "torchrun, or unset RANK for a one-process run") from None


def rank_device(device: torch.device, world: World) -> torch.device:
    """cuda -> this process's GPU (LOCAL_RANK, modulo the GPUs it sees, in case SLURM binds one per task)."""
    if device.type != "cuda" or not world.distributed:
        return device
    index = world.local_rank % torch.cuda.device_count()
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def requested_world() -> World:
    """The processes this run is one of, as torchrun or submitit describe them (not yet joined)."""
    export_submitit_environment()
    return world_from_environment()


@contextlib.contextmanager
def process_group(device: torch.device) -> Iterator[World]:
    """Join the process group the environment describes (if any) for the duration of one run."""
    world = requested_world()
    if not world.distributed or dist.is_initialized():  # one process, or a caller that set it up itself
        yield current_world() if dist.is_initialized() else world
        return
    device = rank_device(device, world)
    backend = "nccl" if device.type == "cuda" else "gloo"
    kwargs = {"device_id": device} if device.type == "cuda" else {}
    dist.init_process_group(backend, timeout=TIMEOUT, **kwargs)
    try:
        yield world
    finally:
        dist.destroy_process_group()


def current_world() -> World:
    """The world of an initialized process group (torchrun or a caller's init), else one process."""
    if not dist.is_initialized():
        return World()
    return World(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", dist.get_rank())))


def wrap(model: torch.nn.Module, device: torch.device, world: World) -> torch.nn.Module:
    """DDP for more than one process (DDP broadcasts rank 0's initial weights to all ranks)."""
    if not world.distributed:
        return model
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)


def collective_device(device: torch.device) -> torch.device:
    """nccl reduces CUDA tensors only; gloo CPU ones."""
    return device if dist.get_backend() == "nccl" else torch.device("cpu")


def token_weight(n: int, device: torch.device, world: World) -> float:
    """world_size * n / (global n): scales a rank's per-token mean so DDP's average is the global mean."""
    if not world.distributed:
        return 1.0
    total = torch.tensor([float(n)], device=collective_device(device), dtype=torch.float64)
    dist.all_reduce(total)
    return world.world_size * n / total.item()


def reduce_step(loss: float, n: int, signum: int, out_of_time: bool, device: torch.device,
                world: World) -> tuple[float, int, int, bool]:
    """One collective per step (a gather of 4 numbers per rank): the global loss (the mean over all
    examples|tokens, so it equals the one-process loss of the global batch), the global count, the
    signal any rank received (0: none) and whether any rank's time budget is spent.

    A NaN on any rank makes the global loss NaN, so every rank sees the divergence at the same step.
    """
    if not world.distributed:
        return loss, n, signum, out_of_time
    mine = torch.tensor([loss * n, n, signum, float(out_of_time)], device=collective_device(device), dtype=torch.float64)
    parts = [torch.empty_like(mine) for _ in range(world.world_size)]
    dist.all_gather(parts, mine)
    rows = torch.stack(parts)
    total = float(rows[:, 1].sum())
    return float(rows[:, 0].sum()) / total, int(total), int(rows[:, 2].max()), bool(rows[:, 3].any())


def any_rank(flag: bool, device: torch.device, world: World) -> bool:
    """True on every rank when flag is True on any (a collective; rank 0's flag alone without DDP)."""
    if not world.distributed:
        return flag
    value = torch.tensor([float(flag)], device=collective_device(device))
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


def barrier(world: World) -> None:
    if world.distributed:
        dist.barrier()


def gather(obj, world: World) -> list:
    """Every rank's obj on rank 0 (a list in rank order), [obj] without DDP, [] on the other ranks."""
    if not world.distributed:
        return [obj]
    out = [None] * world.world_size if world.main else None
    dist.gather_object(obj, out, dst=0)
    return out or []
