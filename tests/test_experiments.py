"""Every experiment preset composes at scale=mini and scale=paper and pins what its table needs.

Composition goes through hydra.compose on configs/ exactly as `python -m rmsnorm_repro.train -m
experiment=<name>` does; the sweep a preset asks for is expanded the way Hydra's basic sweeper
expands it (a cartesian product of hydra.sweeper.params), and each job's config is composed too.
"""
from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from rmsnorm_repro.report.tables import PAGES

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
PRESETS = sorted(p.stem for p in (CONFIGS / "experiment").glob("*.yaml"))

# preset -> (task, norms swept, seeds swept) as the paper's tables and figures ask (docs/recipes.md)
EXPECTED = {
    "table1": ("convpool", {"batchnorm", "weightnorm", "layernorm", "rmsnorm", "prmsnorm"}, {1}),
    "table2": ("rnnsearch", {"none", "layernorm", "l2norm", "weightnorm", "rmsnorm", "prmsnorm"}, {1, 2, 3}),
    "table3": ("rnnsearch", {"none", "layernorm", "rmsnorm", "prmsnorm"}, {1, 2, 3}),  # x codebase: test_codebases.py
    "table4": ("transformer", {"none", "layernorm", "rmsnorm", "prmsnorm"}, {1, 2, 3}),
    "table6": ("reader", {"none", "batchnorm", "layernorm", "rmsnorm", "prmsnorm"}, {1, 2, 3}),
    "table7": ("retrieval", {"none", "layernorm", "rmsnorm", "prmsnorm"}, {1, 2, 3}),
    "table9": ("convpool", {"none", "batchnorm", "weightnorm", "layernorm", "rmsnorm", "prmsnorm"}, {1, 2, 3}),
    "fig3": ("rnnsearch", {"prmsnorm"}, {1}),
    "fig4": ("rnnsearch", {"layernorm", "rmsnorm"}, {1, 2}),  # two seeds a side: the one interval rule
}
# presets that read another preset's runs (same sweep, same run directories)
SHARED = {"table5": "table2", "fig1": "table2", "table8": "table7", "table10": "table9"}
# pRMSNorm's p per task (docs/paper.md: 6.25% for translation, reader and retrieval; 12.5% for CIFAR-10)
PRMS_P = {"rnnsearch": 0.0625, "transformer": 0.0625, "reader": 0.0625, "retrieval": 0.0625, "convpool": 0.125}
# scale=mini's narrower layers take the smallest p whose k reaches the paper's (configs/task_scale/*/mini.yaml)
MINI_P = {"rnnsearch": 0.5, "transformer": 0.5, "reader": 0.46875, "retrieval": 1.0, "convpool": 0.125}


def _need_task(task: str) -> None:
    missing = [p for p in (CONFIGS / "task" / f"{task}.yaml", CONFIGS / "task_scale" / task / "mini.yaml",
                           CONFIGS / "task_scale" / task / "paper.yaml") if not p.exists()]
    if missing:
        pytest.skip(f"task {task} has no configs yet ({', '.join(str(p.relative_to(CONFIGS)) for p in missing)})")


def sweep_jobs(cfg) -> list[list[str]]:
    """The job overrides Hydra's basic sweeper makes of hydra.sweeper.params (cartesian product)."""
    params = cfg.hydra.sweeper.params or {}
    axes = [[f"{key}={value}" for value in str(values).split(",")] for key, values in params.items()]
    return [list(job) for job in itertools.product(*axes)]


def test_every_table_and_figure_has_a_preset():
    expected = {f"table{i}" for i in range(1, 11)} | {"fig1", "fig3", "fig4"}
    assert expected <= set(PRESETS)
    for name in PRESETS:
        text = (CONFIGS / "experiment" / f"{name}.yaml").read_text()
        assert text.startswith("# @package _global_"), name
        preset = OmegaConf.to_container(OmegaConf.create(text))
        assert not any("launcher" in str(entry) for entry in preset.get("defaults", [])), name  # chosen on the command line
        assert "launcher" not in preset.get("hydra", {}) and "launcher" not in preset, name


@pytest.mark.parametrize("scale", ["mini", "paper"])
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_preset_pins_task_norms_and_seeds(name: str, scale: str, compose):
    task, norms, seeds = EXPECTED[name]
    _need_task(task)
    cfg = compose([f"experiment={name}", f"scale={scale}"], hydra_node=True)
    assert cfg.task.name == task and cfg.scale.name == scale
    assert cfg.hydra.runtime.choices.get("hydra/launcher") == "basic"  # presets never choose a launcher
    jobs = sweep_jobs(cfg)
    swept_norms = {o.split("=", 1)[1] for job in jobs for o in job if o.startswith("norm=")} or {cfg.norm.name}
    swept_seeds = {int(o.split("=", 1)[1]) for job in jobs for o in job if o.startswith("seed=")}
    assert swept_norms == norms and swept_seeds == seeds
    # a pRMSNorm job gets the paper's p (at mini: its k), another norm's job p = 1 (one job each: seeds change nothing)
    by_norm = {next((o for o in job if o.startswith("norm=")), "norm=" + cfg.norm.name): job for job in jobs}
    checked = [by_norm.pop("norm=prmsnorm", None), next(iter(by_norm.values()), None)]
    for job in filter(None, checked):
        job_cfg = compose([f"experiment={name}", f"scale={scale}", *job], hydra_node=True)
        OmegaConf.resolve(job_cfg)
        assert job_cfg.task.name == task
        if name == "fig3":
            assert job_cfg.norm.name == "prmsnorm"
        elif job_cfg.norm.name == "prmsnorm":
            assert job_cfg.norm.p == (PRMS_P if scale == "paper" else MINI_P)[task], job
        else:
            assert job_cfg.norm.p == 1.0, job


def test_fig3_sweeps_p_from_10_to_100_percent(compose):
    _need_task("rnnsearch")
    ps = sorted(float(o.split("=")[1]) for job in sweep_jobs(compose(["experiment=fig3"], hydra_node=True)) for o in job
                if o.startswith("norm.p="))
    assert ps == pytest.approx([0.1 * i for i in range(1, 11)])


@pytest.mark.parametrize("scale", ["mini", "paper"])
def test_fig4_shifts_the_init_centre_in_its_own_directory(scale: str, compose):
    _need_task("rnnsearch")
    fig4 = compose(["experiment=fig4", f"scale={scale}"], hydra_node=True)
    table2 = compose(["experiment=table2", f"scale={scale}"], hydra_node=True)
    assert fig4.task.model.init_center == 0.2 and table2.task.model.init_center == 0.0
    assert fig4.hydra.sweep.dir != table2.hydra.sweep.dir


@pytest.mark.parametrize("child, parent", sorted(SHARED.items()))
def test_tables_that_share_runs_share_the_sweep(child: str, parent: str, compose):
    task = EXPECTED[parent][0]
    _need_task(task)
    a, b = compose([f"experiment={child}"], hydra_node=True), compose([f"experiment={parent}"], hydra_node=True)
    assert sweep_jobs(a) == sweep_jobs(b)
    assert a.hydra.sweep.dir == b.hydra.sweep.dir
    assert "experiment" in a.hydra.job.config.override_dirname.exclude_keys  # same run directory names
    assert PAGES[child].task == task


@pytest.mark.parametrize("scale", ["mini", "paper"])
def test_convpool_per_norm_settings_yield_to_the_command_line(scale: str, compose):
    """configs/task_norm/convpool/: lr 3e-4 for the Baseline, 3e-3 otherwise, p = 12.5% for pRMSNorm;
    a command-line optim.lr or norm.p wins, in a preset's job as in a single run."""
    _need_task("convpool")
    for norm, lr, p in [("none", 3e-4, 1.0), ("rmsnorm", 3e-3, 1.0), ("prmsnorm", 3e-3, 0.125), ("batchnorm", 3e-3, 1.0)]:
        for base in (["task=convpool"], ["experiment=table9"]):
            cfg = compose([*base, f"scale={scale}", f"norm={norm}"], hydra_node=True)
            assert (cfg.optim.lr, cfg.norm.p) == (lr, p), (base, norm)
            cfg = compose([*base, f"scale={scale}", f"norm={norm}", "optim.lr=0.01", "norm.p=0.5"], hydra_node=True)
            assert (cfg.optim.lr, cfg.norm.p) == (0.01, 0.5), (base, norm)


@pytest.mark.parametrize("scale", ["mini", "paper"])
@pytest.mark.parametrize("task", ["convpool", "reader", "retrieval", "rnnsearch", "transformer"])
def test_batch_keys_are_the_ones_the_task_reads(task: str, scale: str, compose):
    """Sentence/example batches read train.batch_size; the Transformer's token batches only train.batch_tokens."""
    _need_task(task)
    cfg = compose([f"task={task}", f"scale={scale}"], hydra_node=True)
    assert "batching" not in cfg.task
    if task == "transformer":
        assert "batch_size" not in cfg.train and cfg.train.batch_tokens > 0
    else:
        assert cfg.train.batch_size > 0 and "batch_tokens" not in cfg.train
