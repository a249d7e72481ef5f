"""DDP on CPU (gloo, 2 processes) and the launchers: local parallel sweeps, SLURM submission.

DDP ranks are forked from this process (no second torch import: fast) and join the process group
from torchrun's variables, as `torchrun -m rmsnorm_repro.train` does; one test resumes through the
real torchrun CLI, another runs DDP inside submitit jobs (the SLURM path, on the local executor).
"""
from __future__ import annotations

import json
import math
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from rmsnorm_repro.runner import checkpoint, run
from rmsnorm_repro.runner import distributed
from runner_fixtures.helpers import REPO, cli, cli_args, cli_env, read_metrics, read_summary

# dropout 0: the ranks draw their own dropout masks, so only a dropout-free run matches one process bit for bit
DDP = ["task=tiny", "task.dropout=0", "device=cpu", "train.log_every=1", "train.checkpoint_every=10"]
# the run dir Hydra names under paths.runs_dir: its name lists the overrides that are not defaults
RUN = Path("tiny") / "synthetic-mini" / "rmsnorm-p1.0-s1,device=cpu,task.dropout=0,train.checkpoint_every=10,train.log_every=1"
FORK = multiprocessing.get_context("fork")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank, world, port, target, args, results):
    """A forked rank: torchrun's variables, then `target(*args)`; reports (rank, result or error)."""
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    code = 0
    try:
        results.put((rank, target(*args)))
    except BaseException as e:  # noqa: BLE001 (reported to the test, whatever it is)
        results.put((rank, f"{type(e).__name__}: {e}"))
        code = 1
    finally:
        results.close()
        results.join_thread()  # the queue's feeder thread must flush before _exit
        os._exit(code)  # never run the parent's pytest teardown in a child


def start_ranks(target, *args, world: int = 2):
    results, port = FORK.Queue(), free_port()
    procs = [FORK.Process(target=_rank, args=(r, world, port, target, args, results)) for r in range(world)]
    for p in procs:
        p.start()
    return procs, results


def join_ranks(procs, results, timeout: float = 60) -> list:
    out = dict(results.get(timeout=timeout) for _ in procs)
    for p in procs:
        p.join(timeout)
    return [out[r] for r in range(len(procs))]


def ddp_run(cfg, run_dir):
    summary = run(cfg, run_dir)
    return {k: summary[k] for k in ("status", "steps", "final")} | {"interrupted_by": summary.get("interrupted_by")}


@pytest.mark.slow
def test_two_ranks_train_like_one_process_and_resume_under_torchrun(tmp_path, compose):
    reference = run(compose(["task=tiny", f"paths.runs_dir={tmp_path / 'one'}", *DDP]), tmp_path / "one" / "run")  # one process, global batch 32
    run_dir = tmp_path / "ddp" / RUN

    # 1. two ranks, 16 examples each, for 20 of the 40 steps
    ranks = join_ranks(*start_ranks(ddp_run, compose(["task=tiny", f"paths.runs_dir={tmp_path / 'ddp'}", *DDP, "train.steps=20"]), run_dir))
    assert [r["status"] for r in ranks] == ["completed", "completed"], ranks
    assert ranks[1]["final"] == {} and ranks[0]["final"]  # rank 0 evaluates, rank 1 waits
    # rank 0 alone wrote: one metrics line per step (two writers would duplicate or tear them)
    assert [r["step"] for r in read_metrics(run_dir)] == list(range(1, 21))
    assert sorted(p.name for p in run_dir.iterdir()) == [".lock", "checkpoints", "config.yaml", "metrics.jsonl", "summary.json"]
    assert read_summary(run_dir)["env"]["world_size"] == 2
    saved = checkpoint.load(run_dir / "checkpoints" / "last.pt")
    assert saved["step"] == 20 and len(saved["rng_ranks"]) == 2

    # 2. the real CLI: torchrun resumes the run (same Hydra run dir on both ranks) to step 40
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                           f"--master_port={free_port()}", *cli_args(*DDP, f"paths.runs_dir={tmp_path / 'ddp'}")[1:]],
                          env=cli_env(), cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = read_summary(run_dir)
    assert summary["status"] == "completed" and summary["steps"] == 40

    # the same trajectory as one process with the same global batch (float tolerance: the
    # gradient average is another summation order)
    ddp, one = read_metrics(run_dir), read_metrics(tmp_path / "one" / "run")
    assert [r["step"] for r in ddp] == [r["step"] for r in one] == list(range(1, 41))
    for a, b in zip(ddp, one):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5, abs=1e-6), a["step"]
    assert summary["final"] == pytest.approx(reference["final"], rel=1e-4, abs=1e-6)
    assert summary["best"]["step"] == reference["best"]["step"]
    # throughput counts the examples of all ranks (32 per step, like the one-process run's)
    assert ddp[-1]["examples_per_s"] == pytest.approx(32 / (ddp[-1]["step_ms"] / 1e3), rel=1e-3)
    # Hydra's files: rank 0's .hydra/ and job log only
    assert (run_dir / ".hydra" / "config.yaml").exists() and (run_dir / "train.log").exists()


def _signal_rank_1(cfg, run_dir):
    if int(os.environ["RANK"]) == 1:
        # only this rank is told to stop: the all-reduced flag must stop rank 0 at the same step
        def later():
            while not any(r["step"] >= 8 for r in _lines(run_dir)):
                time.sleep(0.01)
            os.kill(os.getpid(), signal.SIGTERM)
        import threading

        threading.Thread(target=later, daemon=True).start()
    return ddp_run(cfg, run_dir)


def _lines(run_dir):
    try:
        return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.endswith("}")]
    except FileNotFoundError:
        return []


def test_a_signal_to_one_rank_stops_every_rank_at_the_same_step(tmp_path, tiny_cfg):
    run_dir = tmp_path / RUN
    cfg = tiny_cfg(*DDP, "train.steps=200", "task.sleep_ms=10")
    ranks = join_ranks(*start_ranks(_signal_rank_1, cfg, run_dir))
    assert [r["status"] for r in ranks] == ["interrupted", "interrupted"], ranks
    assert [r["interrupted_by"] for r in ranks] == ["SIGTERM", "SIGTERM"]
    assert ranks[0]["steps"] == ranks[1]["steps"] < 200
    summary = read_summary(run_dir)
    assert summary["status"] == "interrupted" and summary["interrupted_by"] == "SIGTERM"
    assert checkpoint.load(run_dir / "checkpoints" / "last.pt")["step"] == summary["steps"]


def _collectives():
    """reduce_step and token_weight with different inputs on the two ranks."""
    import torch.distributed as dist

    dist.init_process_group("gloo")
    try:
        world = distributed.current_world()
        rank = world.rank
        cpu = torch.device("cpu")
        loss = (1.0, 3.0)[rank]
        return {
            "world": (world.rank, world.world_size),
            # 3 examples at loss 1 and 5 at loss 3: the global mean is (3 + 15) / 8
            "mean": distributed.reduce_step(loss, (3, 5)[rank], 0, False, cpu, world),
            # a NaN, a signal and a spent budget on one rank reach every rank
            "flags": distributed.reduce_step((1.0, math.nan)[rank], 4, (0, 15)[rank], rank == 0, cpu, world),
            "weight": distributed.token_weight((3, 5)[rank], cpu, world),
            "gather": distributed.gather(f"rank{rank}", world),
        }
    finally:
        dist.destroy_process_group()


def test_collectives_give_every_rank_the_global_numbers():
    r0, r1 = join_ranks(*start_ranks(_collectives))
    assert (r0["world"], r1["world"]) == ((0, 2), (1, 2))
    for r in (r0, r1):
        assert r["mean"] == (pytest.approx(18 / 8), 8, 0, False)
        loss, n, signum, out_of_time = r["flags"]
        assert math.isnan(loss) and (n, signum, out_of_time) == (8, 15, True)
    # each rank's per-token mean x weight, averaged over ranks (DDP), is the global per-token mean
    assert (r0["weight"], r1["weight"]) == (pytest.approx(2 * 3 / 8), pytest.approx(2 * 5 / 8))
    assert (1.0 * r0["weight"] + 3.0 * r1["weight"]) / 2 == pytest.approx(18 / 8)
    assert (r0["gather"], r1["gather"]) == (["rank0", "rank1"], [])


def test_a_task_that_ddp_would_change_is_refused_on_every_rank(tmp_path, compose):
    cfg = compose(["task=retrieval", "device=cpu", f"paths.runs_dir={tmp_path}"])
    errors = join_ranks(*start_ranks(ddp_run, cfg, tmp_path / "run"))
    assert all(e.startswith("ConfigError: task=retrieval cannot train under DDP") for e in errors), errors
    assert not (tmp_path / "run").exists()


def test_one_process_is_not_distributed(monkeypatch):
    for var in ("RANK", "WORLD_SIZE", "SUBMITIT_EXECUTOR"):
        monkeypatch.delenv(var, raising=False)
    assert distributed.world_from_environment() == distributed.World(0, 1, 0)
    with distributed.process_group(torch.device("cpu")) as world:
        assert not world.distributed and world.main
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(RuntimeError, match="WORLD_SIZE"):
        distributed.world_from_environment()


@pytest.mark.slow
def test_local_parallel_multirun_runs_ddp_jobs_through_submitit(tmp_path):
    # two jobs of one sweep, each a 2-process DDP run set up from submitit's job environment
    # (the path a SLURM job with tasks_per_node = GPUs takes)
    proc = cli("-m", "launcher=local_parallel", "hydra.launcher.tasks_per_node=2", "device=cpu", "task=tiny",
               "seed=1,2", "train.steps=5", f"paths.runs_dir={tmp_path}", timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    sweep = tmp_path / "multirun" / "tiny" / "synthetic-mini"
    summaries = {d.name: read_summary(d) for d in sweep.iterdir() if (d / "summary.json").exists()}
    assert sorted(summaries) == ["device=cpu,seed=1", "device=cpu,seed=2"]
    assert all(s["status"] == "completed" and s["env"]["world_size"] == 2 for s in summaries.values())
    assert all([r["step"] for r in read_metrics(sweep / name)] == [5] for name in summaries)


def test_slurm_launcher_composes_and_writes_the_expected_sbatch_script(tmp_path, monkeypatch, compose):
    from hydra.utils import instantiate
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
    import submitit

    cfg = compose(["task=tiny", "launcher=slurm", "hydra.launcher.partition=gpu", "hydra.launcher.gpus_per_node=8",
                       "hydra.launcher.timeout_min=600", f"paths.runs_dir={tmp_path}"], hydra_node=True)
    launcher = instantiate(cfg.hydra.launcher)  # before any job's HydraConfig exists, as Hydra does
    assert type(launcher).__name__ == "SlurmLauncher"
    # what the plugin's launch() hands submitit (hydra_submitit_launcher.submitit_launcher)
    params = dict(launcher.params)
    assert (params["partition"], params["gpus_per_node"], params["tasks_per_node"]) == ("gpu", 8, 8)
    assert params["array_parallelism"] == 64 and params["max_num_timeout"] == 3
    setup = f"export PATH={Path(sys.executable).parent}:$PATH"  # the venv that submits
    assert params["setup"] == [setup]
    # submitit refuses to build a SLURM executor without srun: a stand-in on PATH (never run)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "srun").write_text("#!/bin/sh\nexit 1\n")
    (tmp_path / "bin" / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    executor = submitit.AutoExecutor(cluster="slurm", folder=params.pop("submitit_folder"),
                                     slurm_max_num_timeout=params.pop("max_num_timeout"))
    base = set(OmegaConf.structured(BaseQueueConf).keys())
    executor.update_parameters(**{k if k in base else f"slurm_{k}": v for k, v in params.items()})
    script = executor._executor._make_submission_file_text("python -m submitit.core._submit", "0")
    for line in ("#SBATCH --partition=gpu", "#SBATCH --gpus-per-node=8", "#SBATCH --ntasks-per-node=8",
                 "#SBATCH --nodes=1", "#SBATCH --time=600", "#SBATCH --job-name=rmsnorm-repro",
                 setup, "export SUBMITIT_EXECUTOR=slurm"):
        assert line in script.splitlines(), line
    assert str(tmp_path / "multirun" / "tiny" / "synthetic-mini" / ".submitit") in script


def test_launchers_are_chosen_on_the_command_line_never_in_experiments():
    for path in sorted((REPO / "configs" / "experiment").glob("*.yaml")):
        tree = OmegaConf.to_container(OmegaConf.load(path))
        defaults = [d for d in tree.get("defaults", []) if isinstance(d, dict)]
        assert not any("launcher" in k for d in defaults for k in d), path.name
        assert "launcher" not in tree.get("hydra", {}), path.name
