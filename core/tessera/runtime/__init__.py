"""Runtime: execution plan, memory planner, executor, profiler, module, artifacts."""

from tessera.runtime.module import Module

__all__ = ["Module"]
