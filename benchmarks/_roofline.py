"""The roofline part of ``cpu_vs_onnxruntime.py --profile``: the host's FMA peak, measured with
code from the llvm code generator for the target's ``-mcpu``, and each conv and matmul kernel's
GFLOP/s as a fraction of it, summed per kind (3x3 convolutions, 1x1 convolutions, depthwise
ones, matrix products).

With ``--target "llvm -mcpu=znver3"`` the peak kernel is built for ``znver3`` too (the ISA the
model's kernels use) and still run on this host: the fractions then say how close the model's
code for that ISA comes to the same ISA's best rate here. A CPU whose code cannot run here
(wider vectors, another architecture) gets no roofline. Nothing is imported at module level
(``limit_threads`` must run before Tessera's thread pool starts).
"""

from __future__ import annotations

from typing import Any

#: The kinds the summary names, in this order (others follow).
SUMMARY_KINDS = ("conv 3x3", "conv 3x3 winograd", "conv 1x1", "matmul")


def llvm_mcpu(target: str) -> tuple[bool, str | None]:
    """Whether ``target`` has an ``llvm`` kind, and its ``-mcpu`` (None: the host)."""
    from tessera.plugin.target import Target

    kind = Target.parse(target).kind("llvm")
    return kind is not None, (kind.get("mcpu") if kind is not None else None)


def kernel_kinds(mod: Any) -> dict[str, str]:
    """Kernel name -> ``conv KHxKW`` (``dw`` added for depthwise: one input channel per
    group) or ``matmul``, from the shapes of the weight constants the plan's steps read
    (``Conv`` weights are ``(O, I/g, KH, KW)``, ``ConvNCHWc`` ones ``(O/ob, I/ib, KH, KW, ib,
    ob)``)."""
    from tessera.runtime.roofline import compute_op

    kinds: dict[str, str] = {}
    for step in mod.plan.steps:
        op = compute_op(step.op)
        if op is None:
            continue
        if "Conv" not in op:
            kinds[step.name] = "matmul"
            continue
        region = mod.compiled.get(step.region)
        constants = region.constants if region is not None else {}
        # the plan names a region's constants "<region>/<name>"
        names = [i.removeprefix(f"{step.region}/") for i in step.inputs]
        if any("_winograd" in n for n in names if n in constants):
            # weights transformed for Winograd (alpha, alpha, O/ob, I/ib, ib, ob): a 3x3
            # convolution, its GFLOP/s counted as the direct convolution's work
            kinds[step.name] = "conv 3x3 winograd"
            continue
        shapes = [tuple(getattr(constants[n], "shape", ())) for n in names if n in constants]
        weight = next((s for s in shapes if len(s) in (4, 6)), None)
        if weight is None:
            kinds[step.name] = "conv"
            continue
        in_per_group = weight[1] * (weight[4] if len(weight) == 6 else 1)
        kinds[step.name] = f"conv {weight[2]}x{weight[3]}" + (" dw" if in_per_group == 1 else "")
    return kinds


def print_roofline(profile: Any, mod: Any, target: str, threads: int, top: int) -> None:
    """Print the measured FMA peak and ``profile``'s roofline against it (or why not)."""
    has_llvm, mcpu = llvm_mcpu(target)
    if not has_llvm:
        print("\nno roofline: the target has no llvm kind to measure a peak with")
        return
    try:
        from tessera_llvm.peak import measure_fma_peak

        peak = measure_fma_peak(threads, mcpu)
    except (ImportError, ValueError) as err:
        print(f"\nno roofline: {err}")
        return
    print(f"\n{peak.describe()}")
    kinds = kernel_kinds(mod)
    print(profile.roofline(peak.gflops, top=top, kind=lambda k: kinds.get(k.name),
                           peak_label=f"{threads} thread(s)"))
    print(summary_line(profile, kinds, peak.gflops))


def summary_line(profile: Any, kinds: dict[str, str], peak_gflops: float) -> str:
    """``conv 3x3 41% of peak (62% of time), ...``: each summary kind's time-weighted
    fraction of the peak and its share of the profile's kernel time."""
    total = sum(k.ms for k in profile.kernels) or 1.0
    parts = []
    for kind in SUMMARY_KINDS:
        ks = [k for k in profile.kernels if kinds.get(k.name) == kind and k.flops > 0]
        ms = sum(k.ms for k in ks)
        if ms > 0:
            fraction = sum(k.flops for k in ks) / (ms * 1e6) / peak_gflops
            parts.append(f"{kind} {100 * fraction:.0f}% of peak ({100 * ms / total:.0f}% of time)")
    return "summary: " + (", ".join(parts) if parts else "no conv or matmul kernels")
