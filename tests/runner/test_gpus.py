"""One GPU per job in a local sweep (runner/gpus.py), on a CPU machine with CUDA mocked."""
import os

import pytest
import torch

from rmsnorm_repro.runner import ConfigError, gpus

CUDA = torch.device("cuda")


@pytest.fixture
def four_gpus(monkeypatch):
    chosen = []
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return chosen


def test_jobs_at_once_take_distinct_gpus_and_a_fifth_is_refused_in_one_line(tmp_path, four_gpus):
    with gpus.one_per_job(tmp_path, CUDA, False) as a, gpus.one_per_job(tmp_path, CUDA, False) as b:
        with gpus.one_per_job(tmp_path, CUDA, False) as c, gpus.one_per_job(tmp_path, CUDA, False) as d:
            assert [a, b, c, d] == four_gpus == [0, 1, 2, 3]
            with pytest.raises(ConfigError, match=r"more jobs at once than the machine has GPUs \(4\).*n_jobs=4") as e:
                with gpus.one_per_job(tmp_path, CUDA, False):
                    pass
            assert "\n" not in str(e.value)
    with gpus.one_per_job(tmp_path, CUDA, False) as again:  # a finished job's GPU is free again
        assert again == 0


def test_another_sweep_does_not_hold_this_ones_gpus(tmp_path, four_gpus):
    with gpus.one_per_job(tmp_path / "sweep1", CUDA, False) as a, gpus.one_per_job(tmp_path / "sweep2", CUDA, False) as b:
        assert a == b == 0


@pytest.mark.parametrize("device,distributed,visible", [
    (torch.device("cuda", 2), False, None),  # device=cuda:2: the user's choice
    (CUDA, True, None),                      # DDP: one GPU per rank (distributed.rank_device)
    (CUDA, False, "3"),                      # the launcher gave the job one GPU
    (torch.device("cpu"), False, None),
])
def test_a_fixed_device_is_left_alone(tmp_path, four_gpus, monkeypatch, device, distributed, visible):
    if visible is not None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    with gpus.one_per_job(tmp_path, device, distributed) as index:
        assert index is None and not four_gpus and not (tmp_path / ".gpus").exists()


def test_one_gpu_machine_chooses_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with gpus.one_per_job(tmp_path, CUDA, False) as index:
        assert index is None


@pytest.mark.parametrize("sweep,ntasks,want", [("*", "1", None), ("2,3", "1", "2,3"), ("*", "2", "0,1")])
def test_local_executor_jobs_get_the_sweeps_gpus_back(monkeypatch, sweep, ntasks, want):
    """submitit's local executor sets CUDA_VISIBLE_DEVICES to "" (gpus_per_node=0) or "0" for every job; a
    one-task job restores the sweep's own value, a DDP job keeps the executor's."""
    monkeypatch.setenv(gpus.SWEEP_GPUS_ENV, sweep)
    monkeypatch.setenv("SUBMITIT_EXECUTOR", "local")
    monkeypatch.setenv("SUBMITIT_LOCAL_NTASKS", ntasks)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1" if ntasks == "2" else "")
    gpus.restore_visible()
    assert os.environ.get("CUDA_VISIBLE_DEVICES") == want


def test_the_sweep_remembers_its_visible_gpus(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv(gpus.SWEEP_GPUS_ENV, raising=False)
    gpus.remember_visible()
    assert os.environ[gpus.SWEEP_GPUS_ENV] == "*"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,3")
    gpus.remember_visible()
    assert os.environ[gpus.SWEEP_GPUS_ENV] == "1,3"


def test_a_sweep_job_of_the_train_entry_takes_its_gpu(tmp_path, four_gpus, monkeypatch):
    from types import SimpleNamespace

    from hydra.types import RunMode
    from omegaconf import OmegaConf

    from rmsnorm_repro import train

    monkeypatch.setattr(train, "in_sweep_worker", lambda: True)
    hydra_cfg = SimpleNamespace(mode=RunMode.MULTIRUN, sweep=SimpleNamespace(dir=str(tmp_path)))
    with train.job_gpu(OmegaConf.create({"device": "cuda"}), hydra_cfg) as index:
        assert index == 0 and four_gpus == [0]
    monkeypatch.setattr(train, "in_sweep_worker", lambda: False)  # a single run, or a SLURM job: nothing chosen
    with train.job_gpu(OmegaConf.create({"device": "cuda"}), hydra_cfg) as index:
        assert index is None


def test_the_run_records_the_gpu_it_trained_on(monkeypatch):
    """A sweep's job on GPU 2 of a machine (torch's current device, set by one_per_job): env.device says
    cuda:2, whatever `device` said (auto, cuda)."""
    from types import SimpleNamespace

    from omegaconf import OmegaConf

    from rmsnorm_repro.runner.setup import environment

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "a mocked GPU")
    run = SimpleNamespace(device=CUDA, cfg=OmegaConf.create({"train": {"compile": False}}),
                          plan=SimpleNamespace(norms=SimpleNamespace(describe=lambda: {"impl": "auto"}), precision="fp32"),
                          world=SimpleNamespace(world_size=1))
    env = environment(run)
    assert env["device"] == "cuda:2" and env["device_name"] == "a mocked GPU" and "tf32" in env
    run.device = torch.device("cuda", 1)  # device=cuda:1 as given
    assert environment(run)["device"] == "cuda:1"
