"""task=convpool: CIFAR-10 ConvPool-CNN-C (Salimans & Kingma 2016), the paper's Tables 9-10."""
from ... import config_resolvers  # noqa: F401  (the task's configs pick optim.lr and norm.p with ${if_eq:...})
from .model import ConvPoolCNNC
from .task import ConvPoolTask

__all__ = ["ConvPoolCNNC", "ConvPoolTask"]
