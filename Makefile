# Two commands do everything on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
SCALE ?= mini
export HF_DATASETS_OFFLINE ?= 1
export HF_HUB_OFFLINE ?= 1

.PHONY: install test test-fast demo table1 speed speed-gpu gpu-check gpu-wheels speed-floor notebook data-wmt14 data-cifar10 data-multi30k

install: $(VENV)/.installed

# Reinstalls when pyproject.toml or setup.py changes; otherwise a no-op (idempotent).
$(VENV)/.installed: pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --upgrade pip
	$(VENV)/bin/pip install -e ".[dev]"
	touch $@

# One pytest worker a core (TEST_WORKERS=1: one process); each worker runs torch on one thread (tests/conftest.py),
# and the SLURM tests share one worker (their one-node cluster has a job slot a core).
TEST_WORKERS ?= 2
test: install
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup

# The tests that train for no more than a few seconds (under 3 minutes on 2 cores): `slow` marks the rest, and
# `slurm` the jobs on a SLURM cluster.
test-fast: install
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup -m "not slow and not slurm"

# The offline mini reproduction of the tables whose claims it can afford (campaigns/demo.py SWEEPS, CLAIMS):
# results/mini/REPORT.md (~20-25 min on 2 cores).
# Refreshes the committed report and figures under results/mini/.
demo: install
	OMP_NUM_THREADS=1 $(PY) -m rmsnorm_repro.campaigns.demo --out results/mini

# Real language: RNNSearch and Transformer x {none, layernorm, rmsnorm, prmsnorm} x 3 seeds on Multi30k
# En-De at scale=small (a fixed number of steps a run; its minutes by CPU in docs/small_study.md), then
# results/small/REPORT.md (README, "Real language: Multi30k"); it prints its plan (runs, CPU, expected
# minutes from earlier runs' times) first, and a rerun after a kill continues where it stopped.
# `make small [SMALL_SEEDS=1,2,3] [DATA_ROOT=dir] [SMALL_JOBS=2] [PRECISION=fp32] [SMALL_OUT=dir]`. The run
# records behind the committed report are in results/small/runs: there every run is finished, so `make
# small` rewrites the report from them; SMALL_OUT=results/small-mine trains anew on this machine. DATA_ROOT: a raw Multi30k
# folder (train/val[/test_*].en/.de[.gz]), relative to the checkout or absolute; when it does not exist,
# the hub copy (`make data-multi30k` once). SMALL_JOBS=2: two runs at a time, one thread each;
# SMALL_JOBS=1: one at a time with all cores. PRECISION: bf16 where the CPU has AMX (amx_bf16: fast bf16
# matrix products), fp32 elsewhere (bf16 without AMX or AVX512-BF16: ~100x slower matmuls).
DATA_ROOT ?= data/multi30k
SMALL_JOBS ?= 2
SMALL_SEEDS ?=          # empty: campaigns/small.py's DEFAULT_SEEDS (1,2,3), stated once there
SMALL_OUT ?= results/small
PRECISION ?= $(shell lscpu 2>/dev/null | grep -q amx_bf16 && echo bf16 || echo fp32)
.PHONY: small
small: install
	$(PY) -m rmsnorm_repro.campaigns.small --out $(SMALL_OUT) --data-root $(DATA_ROOT) --jobs $(SMALL_JOBS) \
		--precision $(PRECISION) $(if $(SMALL_SEEDS),--seeds $(SMALL_SEEDS)) $(ARGS)

# Table 1 is computed, not trained: refreshes the committed results/tables/table1.md, exit 1 unless
# 30/30 cells match.
table1: install
	$(PY) -m rmsnorm_repro.norms.table1 --out results/tables/table1.md

# Paper tables and figures: `make table4 [SCALE=paper] [SEEDS=1,2] [LAUNCHER=joblib] [DATA=...] [ARGS="k=v ..."]`
# runs the experiment preset's multirun (configs/experiment/<target>.yaml), then the report, which
# writes (refreshes, for the committed pages) results/tables/<target>.md and its figures under
# results/figures/; with ARGS containing logger=wandb the report also logs the table to wandb
# (offline unless WANDB_MODE=online; `python -m rmsnorm_repro.report --help`). Targets that read the same runs
# share one sweep directory, where the runner names each run after its swept values, so
# `make table5` after `make table2` trains nothing new (finished runs only re-evaluate); table3 sweeps the
# authors' two codebases (codebase=theano,pytorch) in its own folder.
# DATA: at SCALE=paper each target's paper data (rmsnorm_repro/tasks/paper_data.py; the training refuses
# generated data at that scale unless asked: DATA=synthetic), else generated data.
SEEDS ?=
LAUNCHER ?= basic
DATA ?= $(if $(filter paper,$(SCALE)),$(PAPER_DATA),synthetic)
ARGS ?=
RUNS := results/runs/multirun
PAPER_TARGETS := table2 table3 table4 table5 table6 table7 table8 table9 table10 fig1 fig3 fig4
table2 table5 fig1: SWEEP = rnnsearch
table3: SWEEP = rnnsearch-table3
table4: SWEEP = transformer
table6: SWEEP = reader
table7 table8: SWEEP = retrieval
table9 table10: SWEEP = convpool
fig3: SWEEP = rnnsearch-fig3
fig4: SWEEP = rnnsearch-fig4
table2 table3 table4 table5 fig1 fig3 fig4: PAPER_DATA = wmt14
table6: PAPER_DATA = cnn
table7 table8: PAPER_DATA = coco
table9 table10: PAPER_DATA = cifar10

# What a table costs before it trains: `make plan TABLE=table2 [SCALE=paper] [SEEDS=1,2,3]` prints its runs,
# steps, the data it needs (and whether it is on disk) and GPU-hours from the GPU check's step times.
TABLE ?= table2
.PHONY: plan
plan: install
	$(PY) -m rmsnorm_repro.plan $(TABLE) --scale $(SCALE) $(if $(SEEDS),--seeds $(SEEDS))

.PHONY: $(PAPER_TARGETS)
$(PAPER_TARGETS): install
	$(PY) -m rmsnorm_repro.train -m experiment=$@ scale=$(SCALE) data=$(DATA) launcher=$(LAUNCHER) \
		$(if $(SEEDS),seed=$(SEEDS)) hydra.sweep.dir=$(RUNS)/$(SWEEP)/$(DATA)-$(SCALE) $(ARGS)
	$(PY) -m rmsnorm_repro.report $(RUNS)/$(SWEEP)/$(DATA)-$(SCALE) --table $@ \
		--out results/tables --figures results/figures $(if $(findstring logger=wandb,$(ARGS)),--wandb)

# Module (RMSNorm(d)(x) as users call it, compiled rows, a GRU step), kernel and per-step speed tables
# (CPU, 1 thread) -> results/speed/*.md|json, each with the targets it meets. "tuned": glibc malloc reuses freed memory (rmsnorm_repro.allocator, as in training), the
# same for every norm compared; "default": glibc as it comes.
speed: install
	OMP_NUM_THREADS=1 $(PY) -m rmsnorm_repro.bench --module
	OMP_NUM_THREADS=1 $(PY) -m rmsnorm_repro.bench --kernels --allocator tuned
	OMP_NUM_THREADS=1 $(PY) -m rmsnorm_repro.bench --kernels --allocator default
	OMP_NUM_THREADS=2 $(PY) -m rmsnorm_repro.bench --kernels --allocator tuned --threads 2
	OMP_NUM_THREADS=1 $(PY) -m rmsnorm_repro.bench --steps --allocator tuned

# The one-shot GPU check (docs/performance.md, "The GPU check"): at most 7 minutes on one H100, in one call on
# the lent GPU machine, whose image has torch, Triton, numpy and PyYAML but no hydra-core, omegaconf or antlr4,
# no network and no venv. So this target does not depend on `install` (scripts/gpu_check.sh, also for a machine
# without make): with a .venv it runs that venv's python, else python3; where that python lacks hydra/omegaconf
# it unpacks the wheels `make gpu-wheels` built here (GPU_WHEELS, carried with the tree) into GPU_DEPS
# (pure-python wheels: python's zipfile, no pip, no network) and puts them on PYTHONPATH beside the checkout.
# A smoke stage first (about a minute), then the kernel and per-step tables -> $(GPU_OUT)/gpu-<device>.md|json|log,
# written after every block (GPU_OUT=$$OUT on the lent machine). GPU_ARGS: e.g. "--tasks transformer,rnnsearch"
# for a rerun of part of it.
GPU_OUT ?= results/speed
GPU_WHEELS ?= wheels
GPU_DEPS ?= .gpu-deps
GPU_ARGS ?=
gpu-check speed-gpu:
	@PY=$(PY) GPU_OUT=$(GPU_OUT) GPU_WHEELS=$(GPU_WHEELS) GPU_DEPS=$(GPU_DEPS) GPU_ARGS="$(GPU_ARGS)" sh scripts/gpu_check.sh

# The wheels gpu-check needs on the lent machine, at the versions this .venv pins (needs network here):
# hydra-core, omegaconf, antlr4-python3-runtime 4.9.3 (no wheel on the index: pip builds it from its sdist)
# and packaging (hydra imports it; unpacked there only where the image lacks it); all pure python. Into
# GPU_WHEELS (git-ignored), about 0.5 MiB.
GPU_WHEEL_PACKAGES := hydra-core omegaconf antlr4-python3-runtime packaging
gpu-wheels: install
	rm -rf $(GPU_WHEELS) && mkdir -p $(GPU_WHEELS)
	$(VENV)/bin/pip wheel --no-deps -w $(GPU_WHEELS) $$($(PY) -c "from importlib.metadata import version; \
		print(' '.join(f'{p}=={version(p)}' for p in '$(GPU_WHEEL_PACKAGES)'.split()))")
	@ls -l $(GPU_WHEELS)

# Each part of the small recipes' training step (GRU layer, conditional GRU decoder, Transformer blocks, whole
# steps) beside its matrix products alone, at 1 and 2 threads: results/speed/floor-cpu.{md,json} (~10 min).
# DATA_ROOT: a raw Multi30k folder for the whole steps' batches (as `make small`); synthetic data without one.
speed-floor: install
	$(PY) -m rmsnorm_repro.bench floor $(if $(wildcard $(DATA_ROOT)),--data-root $(DATA_ROOT))

# notebooks/compare_runs.ipynb in JupyterLab (installed into .venv the first time: the `notebook` extra).
# RMSNORM_RUNS_DIR=<dir> make notebook opens it on those runs.
notebook: $(VENV)/.notebook
	$(VENV)/bin/jupyter lab notebooks/compare_runs.ipynb

$(VENV)/.notebook: $(VENV)/.installed
	$(VENV)/bin/pip install -e ".[dev,notebook]"
	touch $@

# One-time downloads for real runs (need network); later runs read the local copies offline.
data-wmt14: install
	HF_DATASETS_OFFLINE=0 HF_HUB_OFFLINE=0 $(PY) scripts/download_wmt14.py --root data/wmt14 --hf-cache data/hf

data-cifar10: install
	$(PY) -c "from torchvision.datasets import CIFAR10; CIFAR10('data/cifar10', train=True, download=True)"

# data=multi30k reads the hub's copy from this cache afterwards (offline).
data-multi30k: install
	HF_DATASETS_OFFLINE=0 HF_HUB_OFFLINE=0 $(PY) -c "import datasets; print(datasets.load_dataset('bentrevett/multi30k', cache_dir='data/hf'))"
