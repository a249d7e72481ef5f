"""Normalized recurrent layers shared by several tasks.

gru.py: NormGRU (RNNSearch encoder and decoder cells, order-embedding text encoder) and the Nematus
initialization; lstm.py: NormLSTM (attentive reader).
"""
from .gru import NormGRU, NormGRUCell, init_matrix_, nematus_init_, nematus_matrix, recurrent_dropout_mask
from .lstm import NormLSTM

__all__ = [
    "NormGRU", "NormGRUCell", "NormLSTM", "init_matrix_", "nematus_init_", "nematus_matrix", "recurrent_dropout_mask",
]
