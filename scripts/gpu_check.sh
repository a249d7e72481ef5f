#!/bin/sh
# The GPU check as `make gpu-check` runs it, for a machine without make: `GPU_OUT=$OUT sh scripts/gpu_check.sh`
# from the checkout's root. Settings (the Makefile's variables of the same names): PY (a venv's python, used
# where it exists; else python3), GPU_OUT (the output folder), GPU_WHEELS (the wheels `make gpu-wheels` built),
# GPU_DEPS (where they are unpacked), GPU_ARGS (more arguments, e.g. --tasks transformer,rnnsearch).
# Where the python lacks hydra/omegaconf/antlr4 (the lent machine's image) the wheels, all pure python, are
# unpacked with python's own zipfile (no pip, no network; packaging only where the python lacks it) and put
# on PYTHONPATH beside the checkout.
set -u
PY=${PY:-.venv/bin/python}
GPU_OUT=${GPU_OUT:-results/speed}
GPU_WHEELS=${GPU_WHEELS:-wheels}
GPU_DEPS=${GPU_DEPS:-.gpu-deps}
GPU_ARGS=${GPU_ARGS:-}
if [ -x "$PY" ]; then py=$PY; else py=python3; fi
deps=
if ! "$py" -c "import hydra, omegaconf, antlr4" 2>/dev/null; then
    if ! ls "$GPU_WHEELS"/*.whl >/dev/null 2>&1; then
        echo "error: $py lacks hydra-core/omegaconf/antlr4 and $GPU_WHEELS/ has no wheels: run make gpu-wheels" \
             "where there is network, and carry $GPU_WHEELS/ with the tree" >&2
        exit 2
    fi
    rm -rf "$GPU_DEPS" && mkdir -p "$GPU_DEPS" || exit 2
    for wheel in "$GPU_WHEELS"/*.whl; do
        case $wheel in */packaging-*) "$py" -c "import packaging" 2>/dev/null && continue;; esac
        "$py" -m zipfile -e "$wheel" "$GPU_DEPS"/ || exit 2
    done
    deps=:$(cd "$GPU_DEPS" && pwd)
fi
echo "gpu-check: $py ($("$py" --version 2>&1))${deps:+, wheels from $GPU_WHEELS/}"
# shellcheck disable=SC2086  # GPU_ARGS: several arguments
PYTHONPATH="$(pwd)$deps" exec "$py" -m rmsnorm_repro.bench --gpu --out "$GPU_OUT" $GPU_ARGS
