"""Runtime: the compiled model, the planner (execution plan, memory plan, signature), the
executor, profiler, module and artifacts."""

from tessera.runtime.compiled import CompiledModel
from tessera.runtime.module import Module
from tessera.runtime.planner import ModulePlan, plan_module

__all__ = ["CompiledModel", "Module", "ModulePlan", "plan_module"]
