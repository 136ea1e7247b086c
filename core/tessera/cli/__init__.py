"""The ``tessera`` command: ``compile``, ``run``, ``inspect`` and ``plugins``.

Flags follow ``tvmc`` where tvmc has them. The entry point is :func:`tessera.cli.main.main`.
"""
