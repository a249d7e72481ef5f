"""Layers shared by several tasks: the normalized GRU (RNNSearch, order-embedding text encoder)."""
from .gru import NormGRU, NormGRUCell, init_matrix_, nematus_init_, nematus_matrix, recurrent_dropout_mask

__all__ = ["NormGRU", "NormGRUCell", "init_matrix_", "nematus_init_", "nematus_matrix", "recurrent_dropout_mask"]
