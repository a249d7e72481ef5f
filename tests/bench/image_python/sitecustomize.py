"""Makes this python import like the lent GPU machine's image (docs/performance.md, "The GPU check"): on
PYTHONPATH, this file blocks what the image lacks. hydra, omegaconf, antlr4 and packaging import only from
outside site-packages (the wheels `make gpu-check` unpacks); and any other module the suite (or those wheels)
import directly must be the standard library's or in IMAGE (torch's, Triton's own imports are theirs: the
image has them with torch). A blocked import raises ModuleNotFoundError, as on the image, and is listed
in the file $IMAGE_PYTHON_BLOCKED names, one a line."""
import importlib.machinery
import os
import sys

# what the image is known to have that the check needs (PERF_NOTES, "The lent GPU machine"): torch, Triton,
# numpy, PyYAML; and the translation tasks' sentencepiece (their vocabulary, generated data's too) and sacreBLEU
# (its signature, fixed when the task is built). Nothing else: scipy, for one, is there but not counted on.
IMAGE = {"torch", "triton", "numpy", "yaml", "_yaml", "sentencepiece", "sacrebleu"}
WHEELS = {"hydra", "omegaconf", "antlr4", "packaging"}
CHECKED = ("rmsnorm_repro", "hydra", "omegaconf", "antlr4")  # importers whose imports must be the image's or the wheels'


def _importer() -> str:
    frame = sys._getframe(2)
    while frame is not None and (frame.f_code.co_filename.startswith("<frozen") or "importlib" in frame.f_code.co_filename):
        frame = frame.f_back
    return "" if frame is None else str(frame.f_globals.get("__name__", ""))


class ImageFinder:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if "." in name or name in sys.stdlib_module_names or name in IMAGE or name == "rmsnorm_repro":
            return None
        if name in WHEELS:
            spec = importlib.machinery.PathFinder.find_spec(name, [p for p in sys.path if "site-packages" not in p])
            if spec is not None:
                return spec
        elif not _importer().startswith(CHECKED):
            return None
        with open(os.environ["IMAGE_PYTHON_BLOCKED"], "a") as f:
            f.write(f"{name} (imported by {_importer() or '?'})\n")
        raise ModuleNotFoundError(f"No module named {name!r} (not in the GPU machine's image)", name=name)


sys.meta_path.insert(0, ImageFinder)
