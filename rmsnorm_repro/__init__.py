"""rmsnorm_repro: reproduction suite for Root Mean Square Layer Normalization."""

from . import paths  # noqa: F401,E402  registers the resolvers configs/*.yaml use, for any compose() of them
