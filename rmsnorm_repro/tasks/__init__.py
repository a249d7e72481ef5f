"""Paper tasks, one folder each, behind the interface in base.py."""
from __future__ import annotations

import importlib

from .base import Task

# name -> "module:Class"; imported lazily so a task's heavy dependencies load only when used.
TASKS = {
    "convpool": "rmsnorm_repro.tasks.convpool.task:ConvPoolTask",
    "rnnsearch": "rmsnorm_repro.tasks.translation.task:RNNSearchTask",
    "transformer": "rmsnorm_repro.tasks.translation.task:TransformerTask",
    "reader": "rmsnorm_repro.tasks.reader.task:ReaderTask",
    "retrieval": "rmsnorm_repro.tasks.retrieval.task:RetrievalTask",
}


def get_task_class(name: str) -> type[Task]:
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; choose one of: {', '.join(TASKS)}")
    module, cls = TASKS[name].split(":")
    return getattr(importlib.import_module(module), cls)


__all__ = ["TASKS", "Task", "get_task_class"]
