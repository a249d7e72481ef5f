"""Speed benchmarks, apart from training (`python -m rmsnorm_repro.bench`, `make speed`).

module.py, kernels.py, steps.py, floor.py, gpu.py: the tables of `make speed`, `speed-floor` and `speed-gpu`
(docs/architecture.md); tables.py what they share; __main__.py the command line.
"""
