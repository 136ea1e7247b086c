"""What an exported object is, read from its ELF header and symbol table: the machine it
is for and the symbols it needs from elsewhere (``nm -u`` without binutils, for any
architecture)."""

from __future__ import annotations

import struct

#: ``e_machine`` values of the architectures exports are made for.
MACHINES = {62: "x86_64", 183: "aarch64", 243: "riscv64", 21: "ppc64"}
_SHT_SYMTAB = 2
_SHT_DYNAMIC = 6
_SHT_DYNSYM = 11
_DT_TEXTREL = 22
_DT_FLAGS = 30
_DF_TEXTREL = 4


def _header(data: bytes) -> tuple[str, int, int, int, int]:
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise ValueError("not a 64-bit ELF file")
    end = "<" if data[5] == 1 else ">"
    machine = struct.unpack_from(end + "H", data, 18)[0]
    shoff = struct.unpack_from(end + "Q", data, 40)[0]
    shentsize, shnum = struct.unpack_from(end + "HH", data, 58)
    return end, machine, shoff, shentsize, shnum


def elf_machine(data: bytes) -> str:
    """The architecture of the ELF file ``data`` (``x86_64``, ``aarch64``, or
    ``machine <n>``)."""
    _, machine, _, _, _ = _header(data)
    return MACHINES.get(machine, f"machine {machine}")


def _sections(data: bytes) -> tuple[str, list[tuple[int, ...]]]:
    end, _, shoff, shentsize, shnum = _header(data)
    return end, [struct.unpack_from(end + "IIQQQQIIQQ", data, shoff + i * shentsize)
                 for i in range(shnum)]


def undefined_symbols(data: bytes, weak: bool = True, dynamic: bool = False) -> list[str]:
    """The names of the global (and, with ``weak``, weak) symbols the ELF file ``data`` uses
    but does not define, sorted: of its symbol table, or with ``dynamic`` of its dynamic
    symbol table (a shared library's), without version suffixes."""
    end, sections = _sections(data)
    binds = (1, 2) if weak else (1,)
    kind = _SHT_DYNSYM if dynamic else _SHT_SYMTAB
    names: set[str] = set()
    for sh in sections:
        if sh[1] != kind:
            continue
        strtab = sections[sh[6]]
        str_off = strtab[4]
        count = sh[5] // sh[9]
        for k in range(1, count):
            name, info, _other, shndx, _value, _size = struct.unpack_from(
                end + "IBBHQQ", data, sh[4] + k * sh[9])
            if shndx == 0 and name and (info >> 4) in binds:  # undefined
                stop = data.index(b"\0", str_off + name)
                names.add(data[str_off + name:stop].decode())
    return sorted(names)


def has_text_relocations(data: bytes) -> bool:
    """Whether the shared library ``data`` needs text relocations (``DT_TEXTREL``, or
    ``DF_TEXTREL`` in ``DT_FLAGS``: what ``readelf -d`` shows as TEXTREL)."""
    end, sections = _sections(data)
    for sh in sections:
        if sh[1] != _SHT_DYNAMIC:
            continue
        for k in range(sh[5] // 16):
            tag, value = struct.unpack_from(end + "qQ", data, sh[4] + k * 16)
            if tag == _DT_TEXTREL or (tag == _DT_FLAGS and value & _DF_TEXTREL):
                return True
    return False
