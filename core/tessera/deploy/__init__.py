"""Deploying compiled models without Python: :func:`export_c` (``tessera export``)."""

from tessera.deploy.c_library import CExport, export_c, find_cc

__all__ = ["CExport", "export_c", "find_cc"]
