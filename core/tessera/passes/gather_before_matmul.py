"""Rows picked from a product are picked before it: ``Gather(MatMul(A, W), i, axis)`` becomes
``MatMul(Gather(A, i, axis), W)``.

A decoder exported for generation computes the logits of every position and keeps the last
(``logits[:, -1, :]``: a ``Gather`` of index -1 on the sequence axis of the output layer's
``MatMul``). For a 128-token prompt and a vocabulary of 151936 that is 35 GFLOP of which one
128th is used: a quarter of a 0.5 B model's prompt. With a two-dimensional ``W`` every axis of
the product but the last is an axis of ``A``, and picking rows commutes with the product, so the
``Gather`` moves to ``A`` and the ``MatMul`` computes only the rows kept.

The rewrite applies when the product is read by that ``Gather`` only (nothing else needs the
other rows), ``W`` is two-dimensional, ``A`` has the product's rank, the gathered axis is not the
last (the columns come from ``W``) and the indices are a constant.
"""

from __future__ import annotations

from tessera.ir.graph import Function, Node
from tessera.passes.base import Pass, Rewriter, take_name


class GatherBeforeMatMul(Pass):
    """See the module doc."""

    opt_level = 2

    def run(self, fn: Function) -> Function:
        rw = Rewriter(fn)
        bypassed: list[Node] = []
        for node in list(fn.nodes):
            if node.op != "Gather" or rw.is_removed(node):
                continue
            moved = self._rewrite(rw, node)
            if moved is not None:
                bypassed.append(moved)
        rw.remove_if_unused(bypassed)
        return rw.finish()

    @staticmethod
    def _rewrite(rw: Rewriter, node: Node) -> Node | None:
        """Move ``node`` (a Gather) before the MatMul it reads; the bypassed MatMul, or None
        when the rewrite does not apply."""
        y, indices = (node.inputs + [None, None])[:2]
        if y is None or indices is None or not indices.is_constant or len(node.outputs) != 1:
            return None
        matmul = y.producer
        if matmul is None or matmul.op != "MatMul" or len(matmul.inputs) != 2 or \
                len(matmul.outputs) != 1 or rw.count(y) != 1:
            return None
        a, w = matmul.inputs
        rank = y.type.ndim
        axis = int(node.attrs.get("axis", 0))
        axis = axis + rank if axis < 0 else axis
        if a is None or w is None or w.type.ndim != 2 or a.type.ndim != rank or \
                not 0 <= axis < rank - 1:
            return None
        out = node.outputs[0]
        picked = rw.add("Gather", [a, indices], {"axis": axis},
                        name=rw.fn.fresh_node_name(f"{node.name}_rows"))
        product = rw.add("MatMul", [picked.output, w], {},
                         name=rw.fn.fresh_node_name(matmul.name))
        if product.output.type != out.type:  # the same result, by the rule above
            rw.remove(product)
            rw.remove(picked)
            return None
        rw.replace(out, product.output)
        take_name(rw.fn, product.output, out)
        rw.remove(node)
        return matmul
