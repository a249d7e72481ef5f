"""task=reader: the bidirectional LSTM attentive reader on CNN cloze questions."""
