"""Normalized recurrent layers shared by several tasks.

gru.py: NormGRU (RNNSearch encoder and decoder cells, order-embedding text encoder) and the Nematus
initialization; lstm.py: NormLSTM (attentive reader); loop_linear.py: LoopLinear, a layer called at every
step of a loop with its weight gradient computed once; fused_gru.py: a GRU transition, and one direction of
a GRU layer, as C++ kernels on CPU; triton_gru.py, triton_lstm.py: the GRU transition and the LSTM step on
CUDA as one Triton launch each way; fused_cgru.py: the conditional GRU decoder with attention over all
target steps as one C++ kernel on CPU; cross_entropy.py: the translation loss (label-smoothed cross-entropy)
as one C++ kernel on CPU.
"""
from . import fused_cgru
from .gru import NormGRU, NormGRUCell, init_matrix_, nematus_init_, nematus_matrix, recurrent_dropout_mask
from .loop_linear import LoopLinear, call_layer
from .lstm import NormLSTM

__all__ = [
    "LoopLinear", "NormGRU", "NormGRUCell", "NormLSTM", "call_layer", "fused_cgru", "init_matrix_", "nematus_init_", "nematus_matrix",
    "recurrent_dropout_mask",
]
