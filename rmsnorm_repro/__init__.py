"""rmsnorm_repro: reproduction suite for Root Mean Square Layer Normalization."""
