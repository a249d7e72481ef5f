"""task=convpool: CIFAR-10 ConvPool-CNN-C (Salimans & Kingma 2016), the paper's Tables 9-10."""
from .model import ConvPoolCNNC
from .task import ConvPoolTask

__all__ = ["ConvPoolCNNC", "ConvPoolTask"]
