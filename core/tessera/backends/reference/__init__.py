"""The built-in numpy reference backend (target kind ``ref``)."""

from tessera.backends.reference.backend import ReferenceBackend

__all__ = ["ReferenceBackend"]
