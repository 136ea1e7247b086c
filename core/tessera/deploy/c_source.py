"""The C text of an exported model: its header and the source running its plan.

:class:`CPlan` is what :mod:`tessera.deploy.c_library` reads from a compiled module: the
arena's size, the inputs and outputs (where each lives, its dtype and shape), and the kernel
calls in order, each argument an offset into the arena or into the weights blob.
:func:`header` and :func:`source` write the C API every exported model has, named with its
``prefix``::

    int  P_create(int num_threads, P_model **model);   /* 0 threads: every CPU */
    int  P_run(P_model *model, const void *const *inputs, void *const *outputs);
    int  P_run_with_arena(void *arena, const void *const *inputs, void *const *outputs);
    void P_destroy(P_model *model);
    void P_set_num_threads(int num_threads);
    const char *P_error_message(int code);
    int P_num_inputs(void), P_num_outputs(void);
    const char *P_input_name(int i), *P_input_dtype(int i);
    int P_input_ndim(int i); const int64_t *P_input_shape(int i); size_t P_input_bytes(int i);
    (and the same for outputs)

``P_ARENA_BYTES`` and ``P_ARENA_ALIGN`` are macros, so a system without ``malloc`` gives
``P_run_with_arena`` a static buffer. :func:`weights_assembly` embeds the weights blob in the
library with ``.incbin``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tessera.deploy.c_sizes import C_HELPERS
from tessera.errors import ExportError

#: Error codes of the C API.
OK, ERR_ARGUMENT, ERR_MEMORY, ERR_CPU, ERR_SIZES = 0, 1, 2, 3, 4
#: The alignment of the arena and the weights blob (a cache line; every planned offset is a
#: multiple of it).
ALIGN = 64
#: CPU features (LLVM's names) a program checks with ``__builtin_cpu_supports`` before it
#: runs code that needs them: the ones GCC and Clang have known for years.
CHECKED_X86_FEATURES = ("sse4.1", "sse4.2", "popcnt", "avx", "avx2", "fma", "bmi", "bmi2",
                        "avx512f", "avx512cd", "avx512vl", "avx512bw", "avx512dq",
                        "avx512vnni")
#: AArch64 features (LLVM's names) a program checks on Linux, each as (auxiliary vector
#: entry, bit) of the kernel's ``HWCAP``/``HWCAP2`` (``getauxval``).
CHECKED_AARCH64_FEATURES = {"neon": ("AT_HWCAP", 1), "aes": ("AT_HWCAP", 3),
                            "sha2": ("AT_HWCAP", 6), "crc": ("AT_HWCAP", 7),
                            "lse": ("AT_HWCAP", 8), "fullfp16": ("AT_HWCAP", 10),
                            "rdm": ("AT_HWCAP", 12), "dotprod": ("AT_HWCAP", 20),
                            "sve": ("AT_HWCAP", 22), "sve2": ("AT_HWCAP2", 1),
                            "i8mm": ("AT_HWCAP2", 13), "bf16": ("AT_HWCAP2", 14)}

#: Where an argument points: ("arena", byte offset), ("weights", byte offset), ("null", 0)
#: or ("sizes", region index: that region's array of size values).
Place = tuple[str, int]


@dataclass
class CTensor:
    """An input or output: its name, dtype name (``float32``), shape, size in bytes and
    place."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    place: Place
    #: a symbolic model's: each dimension as a C expression over the sizes ``s`` (``shape``
    #: and ``nbytes`` are then at the bounds), and for an input each dimension as a size
    #: variable's index or a fixed size (``("var", k)`` / ``("int", n)``)
    dims_c: list[str] | None = None
    spec: list[tuple[str, int]] | None = None
    itemsize: int = 0


@dataclass
class CCall:
    """One kernel call: the C function and its arguments' places; ``comment`` names the
    step."""

    symbol: str
    args: list[Place]
    comment: str = ""


@dataclass
class CPlan:
    """What the generated C runs (see the module doc)."""

    prefix: str
    model: str
    arena_bytes: int
    weights_bytes: int
    inputs: list[CTensor]
    outputs: list[CTensor]
    calls: list[CCall]
    set_threads: list[str] = field(default_factory=list)
    cpu_features: list[str] = field(default_factory=list)
    version: str = ""
    #: a symbolic model's size variables: (name, lowest, highest or -1 for none)
    sizes: list[tuple[str, int, int]] = field(default_factory=list)
    #: per region with run-time sizes, the indices (into ``sizes``) of its size array
    region_sizes: list[list[int]] = field(default_factory=list)
    #: the relations between sizes the model needs: (C expression over ``s``, text)
    relations: list[tuple[str, str]] = field(default_factory=list)


def check_prefix(prefix: str) -> None:
    """Raise :class:`~tessera.errors.ExportError` unless ``prefix`` is a C identifier."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", prefix):
        raise ExportError(f"prefix {prefix!r} is not a C identifier")


def _c_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def header(plan: CPlan) -> str:
    """``<prefix>.h``."""
    p, up = plan.prefix, plan.prefix.upper()
    guard = f"{up}_H"
    lines = [
        f"/* {p}.h: the C API of model {plan.model}, exported by Tessera {plan.version}.",
        " *",
        f" * {p}_create makes a model with an arena of its own; {p}_run runs it (inputs and",
        " * outputs as arrays of pointers to C-contiguous data, in the order below; the",
        f" * caller owns them). One {p}_model runs one call at a time: give each thread its",
        f" * own model, or call {p}_run_with_arena with an arena per thread. The weights are",
        " * read-only and shared. The thread count of the parallel loops is per process",
        f" * ({p}_set_num_threads; {p}_create sets it). Every function returning int returns",
        f" * {up}_OK (0) or an error code ({p}_error_message). */",
        f"#ifndef {guard}", f"#define {guard}", "",
        "#include <stddef.h>", "#include <stdint.h>", "",
        "#ifdef __cplusplus", 'extern "C" {', "#endif", "",
        f"#define {up}_ARENA_BYTES ((size_t){max(plan.arena_bytes, 1)})",
        f"#define {up}_ARENA_ALIGN {ALIGN}",
        f"#define {up}_NUM_INPUTS {len(plan.inputs)}",
        f"#define {up}_NUM_OUTPUTS {len(plan.outputs)}",
        f"#define {up}_OK {OK}", f"#define {up}_ERR_ARGUMENT {ERR_ARGUMENT}",
        f"#define {up}_ERR_MEMORY {ERR_MEMORY}", f"#define {up}_ERR_CPU {ERR_CPU}", ""]
    for kind, tensors in (("INPUT", plan.inputs), ("OUTPUT", plan.outputs)):
        for i, t in enumerate(tensors):
            lines.append(f"#define {up}_{kind}_{i}_BYTES ((size_t){t.nbytes})  "
                         f"/* {t.name}: {t.dtype}{list(t.shape)} */")
    if plan.sizes:
        lines += ["", f"#define {up}_ERR_SIZES {ERR_SIZES}",
                  f"#define {up}_NUM_SIZES {len(plan.sizes)}  /* "
                  + ", ".join(f"{n}: {lo}..{hi if hi >= 0 else 'any'}" for n, lo, hi
                              in plan.sizes) + " */"]
        run = [f"int {p}_run_sized({p}_model *model, const int64_t *sizes, "
               "const void *const *inputs, void *const *outputs);",
               f"int {p}_run_sized_with_arena(void *arena, const int64_t *sizes, "
               "const void *const *inputs, void *const *outputs);",
               f"int {p}_num_sizes(void);",
               f"const char *{p}_size_name(int i);",
               f"int {p}_bind_sizes(const int64_t *const *input_dims, int64_t *sizes);",
               f"int {p}_check_sizes(const int64_t *sizes);",
               f"int {p}_input_dims(int i, const int64_t *sizes, int64_t *dims);",
               f"int {p}_output_dims(int i, const int64_t *sizes, int64_t *dims);"]
    else:
        run = [f"int {p}_run({p}_model *model, const void *const *inputs, "
               "void *const *outputs);",
               f"int {p}_run_with_arena(void *arena, const void *const *inputs, "
               "void *const *outputs);"]
    lines += ["", f"typedef struct {p}_model {p}_model;", "",
              f"int {p}_create(int num_threads, {p}_model **model);", *run,
              f"void {p}_destroy({p}_model *model);",
              f"void {p}_set_num_threads(int num_threads);",
              f"const char *{p}_error_message(int code);",
              f"const char *{p}_required_cpu_features(void);",
              f"int {p}_check_cpu(void);", ""]
    for kind in ("input", "output"):
        lines += [f"int {p}_num_{kind}s(void);",
                  f"const char *{p}_{kind}_name(int i);",
                  f"const char *{p}_{kind}_dtype(int i);",
                  f"int {p}_{kind}_ndim(int i);",
                  f"const int64_t *{p}_{kind}_shape(int i);",
                  f"size_t {p}_{kind}_bytes(int i);", ""]
    lines += ["#ifdef __cplusplus", "}", "#endif", f"#endif /* {guard} */", ""]
    return "\n".join(lines)


def _place(place: Place) -> str:
    kind, offset = place
    if kind == "null":
        return "0"
    if kind == "sizes":
        return f"r{offset}"
    return f"a + {offset}" if kind == "arena" else f"w + {offset}"


def _count(t: CTensor) -> str:
    """The bytes of ``t`` at the call's sizes ``s`` (its static size without them)."""
    if t.dims_c is None:
        return str(t.nbytes)
    return "(size_t)(" + " * ".join([*t.dims_c, f"(int64_t){t.itemsize}"]) + ")"


def _sized_api(plan: CPlan) -> list[str]:
    """The functions of a model with size variables: binding, checks, shapes."""
    p, k = plan.prefix, len(plan.sizes)
    names = ", ".join(_c_string(n) for n, _, _ in plan.sizes)
    lows = ", ".join(f"(int64_t){lo}" for _, lo, _ in plan.sizes)
    highs = ", ".join(f"(int64_t){hi}" for _, _, hi in plan.sizes)
    lines = [C_HELPERS,
             f"static const char *const size_names[] = {{{names}}};",
             f"static const int64_t size_low[] = {{{lows}}};",
             f"static const int64_t size_high[] = {{{highs}}};",
             f"int {p}_num_sizes(void) {{ return {k}; }}",
             f"const char *{p}_size_name(int i) {{ return i >= 0 && i < {k} ? size_names[i] "
             ": 0; }", "",
             f"int {p}_check_sizes(const int64_t *s) {{",
             f"    if (!s) return {ERR_ARGUMENT};",
             f"    for (int i = 0; i < {k}; i++)",
             "        if (s[i] < size_low[i] || (size_high[i] >= 0 && s[i] > size_high[i])) "
             f"return {ERR_SIZES};"]
    for expr, text in plan.relations:
        lines.append(f"    if (!{expr}) return {ERR_SIZES};  /* {text.replace('*/', '* /')} */")
    lines += [f"    return {OK};", "}", "",
              f"int {p}_bind_sizes(const int64_t *const *input_dims, int64_t *s) {{",
              f"    if (!input_dims || !s) return {ERR_ARGUMENT};",
              f"    for (int i = 0; i < {k}; i++) s[i] = -1;"]
    for i, t in enumerate(plan.inputs):
        lines.append(f"    if (!input_dims[{i}]) return {ERR_ARGUMENT};")
        for axis, (kind, value) in enumerate(t.spec or []):
            d = f"input_dims[{i}][{axis}]"
            if kind == "int":
                lines.append(f"    if ({d} != {value}) return {ERR_SIZES};")
            else:
                lines.append(f"    if (s[{value}] < 0) s[{value}] = {d}; "
                             f"else if (s[{value}] != {d}) return {ERR_SIZES};")
    lines += [f"    return {p}_check_sizes(s);", "}", ""]
    for kind, tensors in (("input", plan.inputs), ("output", plan.outputs)):
        lines += [f"int {p}_{kind}_dims(int i, const int64_t *s, int64_t *dims) {{",
                  f"    if (!s || !dims) return {ERR_ARGUMENT};", "    switch (i) {"]
        for i, t in enumerate(tensors):
            dims = t.dims_c or [f"(int64_t){d}" for d in t.shape]
            lines.append(f"    case {i}: " + " ".join(f"dims[{a}] = {d};"
                                                    for a, d in enumerate(dims))
                         + f" return {OK};")
        lines += [f"    default: return {ERR_ARGUMENT};", "    }", "}", ""]
    return lines


def _cpu_check(plan: CPlan) -> list[str]:
    """``P_required_cpu_features`` and ``P_check_cpu``: on x86-64 with GCC or Clang each
    checked feature by ``__builtin_cpu_supports``, on AArch64 Linux by the kernel's hardware
    capabilities; elsewhere nothing is checked."""
    p = plan.prefix
    x86 = [f for f in plan.cpu_features if f in CHECKED_X86_FEATURES]
    arm = [f for f in plan.cpu_features if f in CHECKED_AARCH64_FEATURES]
    lines = [f"const char *{p}_required_cpu_features(void) {{ return "
             f"{_c_string(','.join(x86 + arm))}; }}", "",
             f"int {p}_check_cpu(void) {{",
             "#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))",
             "    __builtin_cpu_init();"]
    lines += [f"    if (!__builtin_cpu_supports({_c_string(f)})) return {ERR_CPU};"
              for f in x86]
    if arm:
        entries = sorted({CHECKED_AARCH64_FEATURES[f][0] for f in arm})
        lines += ["#elif defined(__aarch64__) && defined(__linux__)"]
        lines += [f"    unsigned long {e.lower()} = getauxval({e});" for e in entries]
        for f in arm:
            entry, bit = CHECKED_AARCH64_FEATURES[f]
            lines.append(f"    if (!({entry.lower()} & (1UL << {bit}))) return {ERR_CPU};"
                         f"  /* {f} */")
    return lines + ["#endif", f"    return {OK};", "}", ""]


def source(plan: CPlan) -> str:
    """``<prefix>.c``: the plan and the API."""
    p = plan.prefix
    lines = [f"/* {p}.c: model {plan.model}, exported by Tessera {plan.version}; generated, "
             "do not edit. */",
             "#include <stdint.h>", "#include <stdlib.h>", "#include <string.h>",
             "#include <unistd.h>",
             "#if defined(__aarch64__) && defined(__linux__)", "#include <sys/auxv.h>",
             "#endif", f'#include "{p}.h"', "",
             f"extern const unsigned char {p}_weights[];  /* {p}_weights.S */"]
    for symbol in dict.fromkeys(c.symbol for c in plan.calls):
        lines.append(f"extern void {symbol}(void **args);")
    for symbol in plan.set_threads:
        lines.append(f"extern void {symbol}(int32_t threads);")
    lines += ["", f"struct {p}_model {{ void *arena; }};", ""]
    for kind, tensors in (("input", plan.inputs), ("output", plan.outputs)):
        for i, t in enumerate(tensors):
            dims = ", ".join(str(d) for d in t.shape) or "0"
            lines.append(f"static const int64_t {kind}_shape_{i}[] = {{{dims}}};")
        names = ", ".join(_c_string(t.name) for t in tensors) or "0"
        dtypes = ", ".join(_c_string(t.dtype) for t in tensors) or "0"
        ndims = ", ".join(str(len(t.shape)) for t in tensors) or "0"
        shapes = ", ".join(f"{kind}_shape_{i}" for i in range(len(tensors))) or "0"
        sizes = ", ".join(f"(size_t){t.nbytes}" for t in tensors) or "0"
        lines += [f"static const char *const {kind}_names[] = {{{names}}};",
                  f"static const char *const {kind}_dtypes[] = {{{dtypes}}};",
                  f"static const int {kind}_ndims[] = {{{ndims}}};",
                  f"static const int64_t *const {kind}_shapes[] = {{{shapes}}};",
                  f"static const size_t {kind}_sizes[] = {{{sizes}}};", ""]
    lines += _cpu_check(plan)
    if plan.sizes:
        lines += _sized_api(plan)
    lines += [f"const char *{p}_error_message(int code) {{",
              "    switch (code) {",
              f'    case {OK}: return "ok";',
              f'    case {ERR_SIZES}: return "the sizes are outside their bounds, disagree '
              f'between inputs, or break a relation the model needs";',
              f'    case {ERR_ARGUMENT}: return "an argument is NULL or out of range";',
              f'    case {ERR_MEMORY}: return "out of memory";',
              f'    case {ERR_CPU}: return "this CPU lacks a feature the code was compiled '
              f'for (see {p}_required_cpu_features)";',
              '    default: return "unknown error code";', "    }", "}", "",
              f"void {p}_set_num_threads(int num_threads) {{",
              "    long n = num_threads;",
              "    if (n <= 0) n = sysconf(_SC_NPROCESSORS_ONLN);",
              "    if (n < 1) n = 1;",
              "    if (n > 256) n = 256;"]
    lines += [f"    {symbol}((int32_t)n);" for symbol in plan.set_threads]
    sized = bool(plan.sizes)
    lines += ["    (void)n;", "}", "",
              "static void run_plan(unsigned char *a, "
              + ("const int64_t *s, " if sized else "")
              + "const void *const *inputs, void *const *outputs) {",
              f"    unsigned char *w = (unsigned char *){p}_weights;",
              "    (void)w;"]
    for r, indices in enumerate(plan.region_sizes):
        values = ", ".join(f"s[{k}]" for k in indices) or "0"
        lines.append(f"    int64_t r{r}[] = {{{values}}};")
    for i, t in enumerate(plan.inputs):
        lines.append(f"    memcpy({_place(t.place)}, inputs[{i}], {_count(t)});")
    for c in plan.calls:
        args = ", ".join(_place(a) for a in c.args)
        lines.append(f"    {{ void *args[] = {{{args or '0'}}}; {c.symbol}(args); }}"
                     + (f"  /* {c.comment} */" if c.comment else ""))
    for i, t in enumerate(plan.outputs):
        lines.append(f"    memcpy(outputs[{i}], {_place(t.place)}, {_count(t)});")
    run, sizes_arg, sizes_call = ("run_sized", "const int64_t *sizes, ", "sizes, ") if sized \
        else ("run", "", "")
    lines += ["}", "",
              f"int {p}_{run}_with_arena(void *arena, {sizes_arg}const void *const *inputs, "
              "void *const *outputs) {",
              f"    if (!arena || ((uintptr_t)arena % {ALIGN}) "
              f"|| (!inputs && {len(plan.inputs)}) || (!outputs && {len(plan.outputs)})) "
              f"return {ERR_ARGUMENT};",
              f"    for (int i = 0; i < {len(plan.inputs)}; i++) "
              f"if (!inputs[i]) return {ERR_ARGUMENT};",
              f"    for (int i = 0; i < {len(plan.outputs)}; i++) "
              f"if (!outputs[i]) return {ERR_ARGUMENT};"]
    if sized:
        lines += [f"    int rc = {p}_check_sizes(sizes);", f"    if (rc != {OK}) return rc;"]
    lines += [f"    run_plan((unsigned char *)arena, {sizes_call}inputs, outputs);",
              f"    return {OK};", "}", "",
              f"int {p}_create(int num_threads, {p}_model **model) {{",
              f"    if (!model) return {ERR_ARGUMENT};",
              "    *model = NULL;",
              f"    int cpu = {p}_check_cpu();",
              f"    if (cpu != {OK}) return cpu;",
              f"    {p}_model *m = malloc(sizeof *m);",
              f"    if (!m) return {ERR_MEMORY};",
              f"    size_t bytes = ({p.upper()}_ARENA_BYTES + {ALIGN - 1}) / {ALIGN} * {ALIGN};",
              f"    m->arena = aligned_alloc({ALIGN}, bytes);",
              f"    if (!m->arena) {{ free(m); return {ERR_MEMORY}; }}",
              f"    {p}_set_num_threads(num_threads);",
              "    *model = m;",
              f"    return {OK};", "}", "",
              f"int {p}_{run}({p}_model *model, {sizes_arg}const void *const *inputs, "
              "void *const *outputs) {",
              f"    if (!model) return {ERR_ARGUMENT};",
              f"    return {p}_{run}_with_arena(model->arena, {sizes_call}inputs, outputs);",
              "}", "",
              f"void {p}_destroy({p}_model *model) {{",
              "    if (!model) return;",
              "    free(model->arena);",
              "    free(model);", "}", ""]
    for kind, count in (("input", len(plan.inputs)), ("output", len(plan.outputs))):
        ok = f"i >= 0 && i < {count}"
        lines += [f"int {p}_num_{kind}s(void) {{ return {count}; }}",
                  f"const char *{p}_{kind}_name(int i) {{ return {ok} ? {kind}_names[i] : 0; }}",
                  f"const char *{p}_{kind}_dtype(int i) {{ return {ok} ? {kind}_dtypes[i] : 0; }}",
                  f"int {p}_{kind}_ndim(int i) {{ return {ok} ? {kind}_ndims[i] : -1; }}",
                  f"const int64_t *{p}_{kind}_shape(int i) {{ return {ok} ? {kind}_shapes[i] "
                  ": 0; }",
                  f"size_t {p}_{kind}_bytes(int i) {{ return {ok} ? {kind}_sizes[i] : 0; }}", ""]
    return "\n".join(lines)


def weights_assembly(prefix: str, blob_file: str, empty: bool) -> str:
    """``<prefix>_weights.S``: the blob ``blob_file`` as the read-only, aligned symbol
    ``<prefix>_weights`` (assembled where the blob is, or with ``-Wa,-I<folder>``)."""
    data = '    .byte 0' if empty else f'    .incbin "{blob_file}"'
    return "\n".join([
        f"/* {prefix}_weights.S: the weights of the exported model (generated). */",
        "    .section .rodata",
        f"    .balign {ALIGN}",
        f"    .globl {prefix}_weights",
        f"    .type {prefix}_weights, STT_OBJECT",
        f"{prefix}_weights:",
        data,
        f"    .size {prefix}_weights, . - {prefix}_weights",
        '    .section .note.GNU-stack,"",%progbits', ""])


def version_script(prefix: str) -> str:
    """The linker version script of the shared library: the API exported, nothing else."""
    return f"{{\n  global: {prefix}_*;\n  local: *;\n}};\n"
