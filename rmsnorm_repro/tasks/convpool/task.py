"""task=convpool: CIFAR-10 classification with ConvPool-CNN-C, the paper's Tables 9 and 10.

Data: data=cifar10 (torchvision's files, ZCA-whitened) or data=synthetic (generated, the default).
Metrics, in percent like the paper's tables:
  error, accuracy   on the test set; "valid" uses the test set too: CIFAR-10 has no validation set
                    and Salimans' script (the paper's protocol) logs test error every epoch
  train_batch_error Table 9's training error as the authors measured it (weight_norm train.py:103,
                    137-141): the mean error of the training batches since the last evaluation (one
                    epoch at scale=paper), noise and dropout on, each batch scored by the weights of
                    its own step. Under DDP rank 0's batches. A run resumed between two evaluations
                    averages the batches since the resume (paper checkpoints fall on evaluations).
  train_error       the same curve measured again: a fixed subset of the training set, model in eval
                    mode (no noise, no dropout); reads lower, and is the same whether or not a run
                    was resumed.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from omegaconf import DictConfig
from torch import Tensor, nn

from ...norms import Normalization
from ..base import Task, check_int
from . import data as D
from .model import ConvPoolCNNC


class ConvPoolTask(Task):
    name = "convpool"
    supported_norms = ("none", "batchnorm", "weightnorm", "layernorm", "rmsnorm", "prmsnorm")
    supported_data = ("synthetic", "cifar10")
    unit = "examples"
    best_metric = ("error", "min")

    def __init__(self, cfg: DictConfig, norms: Normalization, device: torch.device):
        super().__init__(cfg, norms, device)
        data_name = cfg.data.name
        if data_name not in self.supported_data:
            raise ValueError(f"data={data_name} is not supported by task=convpool; choose one of: {', '.join(self.supported_data)}")
        train_x, train_y, test_x, test_y = self._load_cifar10() if data_name == "cifar10" else self._make_synthetic()
        self.train_x, self.train_y = train_x.to(device), train_y.to(device)
        self.test_x, self.test_y = test_x.to(device), test_y.to(device)

        self.batch_size = int(cfg.train.batch_size)
        # whole batches only, like Salimans' script: every epoch sees one fresh permutation of the set
        self.steps_per_epoch = len(self.train_x) // self.batch_size
        if self.steps_per_epoch < 1:
            raise ValueError(f"train.batch_size={self.batch_size} exceeds the {len(self.train_x)} training images")
        self._perm_epoch, self._perm = -1, None
        # train_batch_error: wrong answers and examples of the training batches since the last evaluation
        # (a tensor sum: no device sync per step), and the last interval's value for the final summary
        self._wrong, self._seen, self._batch_error = torch.zeros((), dtype=torch.long, device=device), 0, None

    @classmethod
    def check_config(cls, cfg: DictConfig) -> None:
        check_int(cfg, "task.eval_batch_size", 1)
        check_int(cfg, "task.train_error_size", 1)
        for split in ("train", "test"):  # data=synthetic: an empty split would fail at evaluation
            check_int(cfg, f"task.synthetic.{split}_size", 1)

    # Data -------------------------------------------------------------------------------------------
    def _make_synthetic(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        s, classes = self.cfg.task.synthetic, int(self.cfg.task.model.num_classes)
        # the data stay fixed across run seeds, like a real data set; different seeds for train and test
        train = D.synthetic_images(int(s.train_size), int(s.seed), classes, float(s.noise), int(s.distractors))
        test = D.synthetic_images(int(s.test_size), int(s.seed) + 1, classes, float(s.noise), int(s.distractors))
        return (*train, *test)

    def _load_cifar10(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        d = self.cfg.data
        train_x, train_y, test_x, test_y = D.load_cifar10(d.root, bool(d.get("download", False)))
        if not d.get("zca", True):
            return D.scale_pixels(train_x), train_y, D.scale_pixels(test_x), test_y
        # fit and whiten on the run's device: the 3072 x 3072 products are the costly part
        train_x, test_x = train_x.to(self.device), test_x.to(self.device)
        mean, w = D.zca_whitener(train_x, float(d.zca_eps), self.cfg.paths.cache_dir)
        return D.whiten(train_x, mean, w), train_y, D.whiten(test_x, mean, w), test_y

    def train_batch(self, step: int, rank: int = 0, world_size: int = 1) -> tuple[Tensor, Tensor]:
        """Batch `step` of the epoch permutation drawn from (seed, epoch); under DDP this rank's slice."""
        if self.batch_size % world_size:
            raise ValueError(f"train.batch_size={self.batch_size} must be divisible by the {world_size} processes")
        epoch, i = divmod(int(step), self.steps_per_epoch)
        if epoch != self._perm_epoch:  # one permutation per epoch, recomputed only when the epoch changes
            g = torch.Generator().manual_seed(int(self.cfg.seed) * 1_000_003 + epoch)
            self._perm = torch.randperm(len(self.train_x), generator=g).to(self.device)
            self._perm_epoch = epoch
        shard = self.batch_size // world_size
        idx = self._perm[i * self.batch_size + rank * shard : i * self.batch_size + (rank + 1) * shard]
        return self.train_x[idx], self.train_y[idx]

    # Model, loss, metrics ---------------------------------------------------------------------------
    def build_model(self) -> nn.Module:
        m = self.cfg.task.model
        widths = [max(1, round(w * float(m.width_mult))) for w in m.widths]
        model = ConvPoolCNNC(self.norms, widths, int(m.num_classes), float(m.input_noise), float(m.dropout), float(m.leaky_slope),
                             bool(m.get("norm_logits", True)), str(m.get("init") or "he"), float(m.get("init_std") or 0.05))
        return model.to(self.device)

    def loss(self, model: nn.Module, batch: tuple[Tensor, Tensor]) -> tuple[Tensor, int]:
        x, y = batch
        logits = model(x)
        if model.training and self.cfg.task.get("train_batch_error"):
            self._wrong += (logits.detach().argmax(1) != y).sum()
            self._seen += len(y)
        return F.cross_entropy(logits, y), len(y)

    @torch.no_grad()
    def _error(self, model: nn.Module, x: Tensor, y: Tensor) -> float:
        """Classification error in percent, in chunks of task.eval_batch_size."""
        chunk, wrong = int(self.cfg.task.eval_batch_size), 0
        for i in range(0, len(x), chunk):
            self.check_stop()
            wrong += (model(x[i : i + chunk]).argmax(1) != y[i : i + chunk]).sum().item()
        return 100.0 * wrong / len(x)

    def evaluate(self, model: nn.Module, split: str) -> dict[str, float]:
        if split not in ("valid", "test"):
            raise ValueError(f"split must be 'valid' or 'test', got {split!r}")
        error = self._error(model, self.test_x, self.test_y)
        n = int(self.cfg.task.train_error_size)
        train_error = self._error(model, self.train_x[:n], self.train_y[:n])
        out = {"error": error, "accuracy": 100.0 - error, "train_error": train_error}
        if split == "valid" and self._seen:
            self._batch_error = 100.0 * int(self._wrong) / self._seen
            self._wrong.zero_()
            self._seen = 0
        if self._batch_error is not None:
            out["train_batch_error"] = self._batch_error
        return out
