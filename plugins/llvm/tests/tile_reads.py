"""Reading lowered TIR for register tiles read in loops (tests of the symbolic schedules).

A symbolic kernel's module is not unrolled by LLVM (:mod:`tessera_llvm.build`), so a loop of
constant extent that reads a register tile at an offset of its variable (writing the tile
out element by element) keeps the tile in memory: the schedules unroll those loops in TIR.
:func:`tile_reads_in_loops` lists what is left of them.
"""

from __future__ import annotations

from tessera.tir import expr as E
from tessera.tir import stmt as S
from tessera.tir.functor import nodes_of


def tile_reads_in_loops(func: S.PrimFunc) -> list[str]:
    """``"<buffer> in loop <var>"`` for every load of a register tile (a local buffer that
    accumulates: stored with a value read from itself) whose index uses the variable of a
    loop of constant extent around it."""
    tiles = {st.buffer for st in nodes_of(func.body, S.BufferStore)
             if st.buffer.scope == "local"
             and any(x.buffer is st.buffer for x in nodes_of(st.value, E.BufferLoad))}
    out = []
    for loop in nodes_of(func.body, S.For):
        if not isinstance(loop.extent, E.IntImm):
            continue  # a run-time count (columns of a tile narrower than a vector)
        for x in nodes_of(loop.body, E.BufferLoad):
            if x.buffer in tiles and any(loop.loop_var in nodes_of(i, E.Var)
                                         for i in x.indices):
                out.append(f"{x.buffer.name} in loop {loop.loop_var.name}")
    return sorted(set(out))
