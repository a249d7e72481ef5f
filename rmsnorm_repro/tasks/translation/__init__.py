"""Machine translation (paper section on WMT14 En-De): data, models, decoding, BLEU, tasks."""
