"""A seeded mutation fuzzer: corrupted ONNX models must compile and run, or fail with a
:class:`~tessera.errors.TesseraError` naming what is wrong, never crash, hang or blow memory.

``python -m tessera.testing.fuzz --cases 2000 --seed 1 --targets ref,llvm`` runs a long fuzz;
``--case N`` reruns one case in this process with its traceback.
"""

from tessera.testing.fuzz.runner import GOOD, OUTCOMES, Report, Result, generate_case, run_fuzz

__all__ = ["GOOD", "OUTCOMES", "Report", "Result", "generate_case", "run_fuzz"]
