"""Speed benchmarks, apart from training (`python -m rmsnorm_repro.bench`, `make speed`).

kernels.py: norm implementations x shapes, forward and forward+backward, vs torch's LayerNorm.
steps.py:   per-step time of every task x norm at the paper's model sizes, vs the paper's ratios; the
            side-by-side timing (balanced order, paired batches) the reports' speed claims are judged on.
paired.py:  that timing's statistics (paired log ratios, rounds as blocks) and its record, speed.json.
"""
