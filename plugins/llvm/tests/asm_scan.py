"""Reading LLVM's assembly of micro-kernels: loops, FMAs and register spills.

The input is what ``TargetMachine.emit_assembly`` prints for an ELF target, x86_64 (AT&T syntax)
or AArch64, best with asm verbosity on (LLVM then marks its own spill code with comments such as
``# 32-byte Spill`` and ``// 16-byte Folded Reload``).

- :func:`functions` splits the text into functions: from the ``NAME:`` label that follows
  ``.type NAME,@function`` to the next ``.Lfunc_end`` label (or the next function).
- :func:`loops` finds the loops of a function as spans of lines: a label and the last branch
  back to it (a branch whose target label comes at or before the branch). Code LLVM emits is
  laid out so that every loop's blocks lie between its header label and its latch branch.
- :func:`innermost_fma_loops` keeps the loops that contain FMA instructions (x86 ``vfmadd*``,
  ``vfnmadd*``, ``vfmsub*``; AArch64 ``fmla``/``fmls``/``fmadd``) and hold no smaller such loop:
  the reduction loops of the register-tiled micro-kernels (or, where LLVM unrolled the
  reduction completely, the loop around the unrolled FMAs).
- :func:`vector_spills` lists the lines of a span that move a vector register to or from the
  stack: a line LLVM marks ``Spill``/``Reload`` that names a vector register, or any line with
  a vector register and a stack operand. x86: ``%xmm``/``%ymm``/``%zmm`` with ``off(%rsp)``
  (no index register), or ``off(%rbp)`` when the function sets up a frame pointer (otherwise
  ``%rbp`` is an ordinary register holding a data pointer). AArch64: a SIMD/FP register
  (``q``, ``d``, ``s``, ``h``, ``b``, ``v``) with an ``[sp`` operand, or ``[x29`` with a frame
  pointer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_FUNC_TYPE = re.compile(r"^\s*\.type\s+([\w.$]+),\s*@function")
_LABEL = re.compile(r"^([\w.$]+):")
_FMA = re.compile(r"^\s*(v?f[n]?madd\w*|vfn?msub\w*|fmla|fmls)\b")
#: x86 jumps (jmp, jne, ...) and AArch64 branches (b, b.ne, cbz, cbnz, tbz, tbnz); the target
#: label is the last operand.
_BRANCH = re.compile(r"^\s*(j[a-z]+|b|b\.[a-z]+|cbn?z|tbn?z)\s+(?:.*,\s*)?([\w.$]+)\s*$")

_X86_REG = re.compile(r"%(?:r[a-z0-9]{1,3}|e[a-z]{2}|[xyz]mm\d+)\b")
_X86_VEC = re.compile(r"%[xyz]mm\d+")
_X86_RSP = re.compile(r"(?<![\w)])-?(?:0x[0-9a-f]+|\d+)?\(%rsp\)")
_X86_RBP = re.compile(r"(?<![\w)])-?(?:0x[0-9a-f]+|\d+)?\(%rbp\)")
_X86_FRAME = re.compile(r"^\s*movq?\s+%rsp,\s*%rbp\b")
_ARM_VEC = re.compile(r"\b(?:[qdshb]\d+|v\d+\.\w+)\b")
_ARM_SP = re.compile(r"\[sp\b")
_ARM_FP = re.compile(r"\[x29\b")
_ARM_FRAME = re.compile(r"^\s*(?:mov\s+x29,\s*sp|add\s+x29,\s*sp\b)")


@dataclass(frozen=True)
class Line:
    """One line of assembly: the instruction or directive text and its comment."""

    text: str
    comment: str


def comment_mark(asm: str) -> str:
    """``#`` for x86 AT&T syntax (registers written ``%rax``), else ``//`` (AArch64, whose
    immediates are written ``#4``)."""
    code = (raw.split("//", 1)[0] for raw in asm.splitlines())  # x86 code has no ``//``
    return "#" if any(_X86_REG.search(c) for c in code) else "//"


def _split(raw: str, mark: str) -> Line:
    cut = raw.find(mark)
    if cut < 0:
        return Line(raw.rstrip(), "")
    return Line(raw[:cut].rstrip(), raw[cut + len(mark):].strip())


def functions(asm: str) -> dict[str, list[Line]]:
    """The lines of each function of ``asm``, by name."""
    out: dict[str, list[Line]] = {}
    pending: set[str] = set()
    current: list[Line] | None = None
    mark = comment_mark(asm)
    for raw in asm.splitlines():
        line = _split(raw, mark)
        typed = _FUNC_TYPE.match(line.text)
        if typed:
            pending.add(typed.group(1))
            continue
        label = _LABEL.match(line.text)
        if label and label.group(1) in pending:
            current = out.setdefault(label.group(1), [])
            pending.discard(label.group(1))
            continue
        if label and label.group(1).startswith(".Lfunc_end"):
            current = None
            continue
        if current is not None:
            current.append(line)
    return out


def loops(lines: list[Line]) -> list[tuple[int, int]]:
    """Each loop of a function as (index of its header label, index of its last back
    branch), in the order of the headers."""
    labels = {m.group(1): i for i, ln in enumerate(lines) if (m := _LABEL.match(ln.text))}
    ends: dict[int, int] = {}
    for i, ln in enumerate(lines):
        branch = _BRANCH.match(ln.text)
        if branch and branch.group(2) in labels and labels[branch.group(2)] <= i:
            start = labels[branch.group(2)]
            ends[start] = max(ends.get(start, i), i)
    return sorted(ends.items())


def is_fma(line: Line) -> bool:
    return bool(_FMA.match(line.text))


def innermost_fma_loops(lines: list[Line]) -> list[tuple[int, int]]:
    """The loops holding FMAs that contain no smaller loop holding FMAs."""
    with_fma = [(s, e) for s, e in loops(lines) if any(is_fma(ln) for ln in lines[s:e + 1])]
    return [(s, e) for s, e in with_fma
            if not any((s2, e2) != (s, e) and s <= s2 and e2 <= e for s2, e2 in with_fma)]


def fma_loop_body(asm: str, function: str) -> list[str]:
    """The instructions (no labels or directives) of ``function``'s innermost FMA loop with
    the most FMAs; empty when it has none."""
    lines = functions(asm).get(function, [])
    best = max(innermost_fma_loops(lines), default=None,
               key=lambda span: sum(is_fma(ln) for ln in lines[span[0]:span[1] + 1]))
    if best is None:
        return []
    return [ln.text.strip() for ln in lines[best[0]:best[1] + 1]
            if ln.text.strip() and not _LABEL.match(ln.text) and not ln.text.strip()
            .startswith(".")]


def _has_frame_pointer(lines: list[Line]) -> tuple[bool, bool]:
    """(x86 frame pointer set up, AArch64 frame pointer set up)."""
    return (any(_X86_FRAME.match(ln.text) for ln in lines),
            any(_ARM_FRAME.match(ln.text) for ln in lines))


def vector_spills(lines: list[Line], span: tuple[int, int]) -> list[str]:
    """The lines of ``lines[span[0]:span[1] + 1]`` that move a vector register to or from a
    stack slot (see the module docstring)."""
    x86_fp, arm_fp = _has_frame_pointer(lines)
    found = []
    for ln in lines[span[0]:span[1] + 1]:
        text = ln.text
        x86_vec, arm_vec = _X86_VEC.search(text), _ARM_VEC.search(text)
        marked = ("Spill" in ln.comment or "Reload" in ln.comment) and (x86_vec or arm_vec)
        x86_stack = _X86_RSP.search(text) or (x86_fp and _X86_RBP.search(text))
        arm_stack = _ARM_SP.search(text) or (arm_fp and _ARM_FP.search(text))
        if marked or (x86_vec and x86_stack) or (arm_vec and arm_stack):
            found.append(f"{text.strip()}  {ln.comment}".rstrip())
    return found
