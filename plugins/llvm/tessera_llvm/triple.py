"""Target triples: the host's, or the one ``-mtriple`` names (cross-compilation).

The backend generates ELF object code for two architectures, ``x86_64`` and ``aarch64``
(``-mtriple=aarch64-linux-gnu`` on an x86 machine compiles for 64-bit Arm Linux). Code for a
triple whose architecture is not the host's can be exported in an artifact but not linked into
this process: :func:`is_foreign` tells the backend so.
"""

from __future__ import annotations

import functools

from tessera.errors import TargetError
from tessera_llvm.lock import LLVM_LOCK

#: Architectures (LLVM's normalised names) the backend generates code for.
SUPPORTED_ARCHES = ("x86_64", "aarch64")
#: Example triples shown in errors.
EXAMPLES = ("x86_64-linux-gnu", "aarch64-linux-gnu")

_all_targets = False


def init_all_targets() -> None:
    """Register every target LLVM was built with (code generators and assembly printers);
    the native target alone cannot emit code for another architecture."""
    global _all_targets
    if not _all_targets:
        import llvmlite.binding as llvm

        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
        _all_targets = True


def host_triple() -> str:
    import llvmlite.binding as llvm

    return llvm.get_process_triple()


@functools.lru_cache(maxsize=32)
def triple_arch(triple: str) -> str:
    """LLVM's architecture name of ``triple`` (``arm64-apple-darwin`` -> ``aarch64``)."""
    import llvmlite.binding as llvm

    return llvm.get_triple_parts(triple).Arch


def host_arch() -> str:
    return triple_arch(host_triple())


def is_foreign(triple: str | None) -> bool:
    """Whether code for ``triple`` (None: the host's) cannot run in this process."""
    return triple is not None and triple_arch(triple) != host_arch()


@functools.lru_cache(maxsize=32)
def check_triple(triple: str) -> str:
    """``triple`` when LLVM has a target for it and the backend supports its architecture
    and object format (ELF), else a TargetError listing what is supported."""
    import llvmlite.binding as llvm

    supported = (f"tessera-llvm generates ELF object code for {' and '.join(SUPPORTED_ARCHES)} "
                 f"(e.g. -mtriple={EXAMPLES[1]}, -mtriple={EXAMPLES[0]}; this host is "
                 f"{host_triple()})")
    with LLVM_LOCK:
        init_all_targets()
        try:
            llvm.Target.from_triple(triple)
        except RuntimeError as err:
            raise TargetError(f"llvm -mtriple={triple}: LLVM has no target for this triple "
                              f"({err}); {supported}") from err
        parts = llvm.get_triple_parts(triple)
    if parts.Arch not in SUPPORTED_ARCHES:
        raise TargetError(f"llvm -mtriple={triple}: architecture {parts.Arch!r} is not "
                          f"supported; {supported}")
    if parts.ObjectFormat != "ELF":
        raise TargetError(f"llvm -mtriple={triple}: object format {parts.ObjectFormat}, "
                          f"expected ELF; {supported}")
    return triple
