"""The step-by-step form (``set_input`` / ``run()`` / ``get_output``, per thread) of modules
whose calls take whole input dicts: :class:`~tessera.runtime.dynamic.DynamicModule` and
:class:`~tessera.runtime.staged.StagedModule`. Each thread keeps copies of the inputs it set
and the outputs of its last step-by-step run, as :class:`~tessera.runtime.module.Module`'s
form keeps them per thread in its execution state.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tessera.errors import RunError


@dataclass
class StepInputs:
    """A thread's step-by-step form: the inputs it set and its last outputs."""

    inputs: dict[str, np.ndarray] = field(default_factory=dict)
    outputs: dict[str, np.ndarray] | None = None


class StepForm:
    """Mixin: ``set_input`` and ``get_output`` over a per-thread :class:`StepInputs`. The class
    sets ``output_names`` and answers :meth:`_knows_input` and :meth:`_inputs_text`; its
    ``run()`` without inputs runs ``_step().inputs`` and stores ``_step().outputs``."""

    output_names: list[str]
    _local: threading.local

    def _knows_input(self, name: str) -> bool:
        raise NotImplementedError

    def _inputs_text(self) -> str:
        raise NotImplementedError

    @staticmethod
    def _feeds(feeds: Mapping[str, Any] | None, inputs: dict[str, Any]) -> dict[str, Any]:
        """``run``'s inputs from a feeds dict or keywords (not both)."""
        if feeds is None:
            return inputs
        if not isinstance(feeds, Mapping):
            raise RunError(f"run(feeds): feeds must be a dict of input name -> array, not "
                           f"{type(feeds).__name__}")
        if inputs:
            raise RunError("run(): give the inputs either as a dict or as keywords, not both")
        return dict(feeds)

    def _step(self) -> StepInputs:
        state = getattr(self._local, "state", None)
        if state is None:
            state = self._local.state = StepInputs()
        return state

    def set_input(self, name: str, value: Any) -> None:
        """Keep a copy of one input for this thread's next step-by-step ``run()``."""
        if not self._knows_input(name):
            raise RunError(f"unknown input {name!r}; the model's inputs are "
                           f"{self._inputs_text()}")
        self._step().inputs[name] = np.array(value, copy=True)

    def get_output(self, index: int | str, out: np.ndarray | None = None) -> np.ndarray:
        """An output, by position or name, of this thread's last step-by-step ``run()``
        (written into ``out`` when given, which must have its shape and dtype)."""
        outputs = self._step().outputs
        if outputs is None:
            raise RunError("get_output: no step-by-step run() in this thread yet")
        if isinstance(index, int):
            if not -len(self.output_names) <= index < len(self.output_names):
                raise RunError(f"output index {index} out of range; the model has "
                               f"{len(self.output_names)} outputs")
            name = self.output_names[index]
        elif index in outputs:
            name = index
        else:
            raise RunError(f"unknown output {index!r}; the model's outputs are "
                           f"{', '.join(self.output_names)}")
        value = outputs[name]
        if out is None:
            return value.copy()
        if out.shape != value.shape or out.dtype != value.dtype:
            raise RunError(f"get_output({index!r}, out): out must be {value.dtype}"
                           f"{list(value.shape)}, got {out.dtype}{list(out.shape)}")
        np.copyto(out, value)
        return out
