"""The Backend base class and what compiling a region produces.

A backend is a class (not a dict): its name is the target kind, its device says where its
buffers live, ``claims`` says which ops and composite patterns it runs, ``compile`` turns a region
into kernels, and ``save``/``load`` put compiled code into an artifact and take it back.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from tessera.errors import ExportError
from tessera.ir.graph import Function, Node
from tessera.ir.types import TensorType
from tessera.plugin.device import CPU, Device
from tessera.plugin.distribution import distribution_version
from tessera.plugin.exported import ExportedCode
from tessera.plugin.kernel_cache import KernelCache
from tessera.plugin.patterns import Pattern
from tessera.plugin.records import ScheduleOverrides, TuningHistory
from tessera.plugin.subgraphs import SubgraphCompiler
from tessera.plugin.target import TargetKind
from tessera.progress import Progress

#: A kernel's calling convention: input buffers, output buffers (preallocated); returns nothing.
#: A kernel of a region with run-time sizes also takes the sizes array
#: (``CompiledRegion.size_names``).
KernelFn = Callable[[list[Any], list[Any]], None]
#: Binds a region's kernels to their buffers all at once: it receives each kernel's (inputs,
#: outputs) buffer lists, in the order of ``CompiledRegion.kernels``, and returns a call that
#: runs every kernel in that order (for instance one native call instead of one per kernel).
#: An entry is None for a kernel whose work the runtime does itself (an elided concatenation,
#: see ``Kernel.concat_offsets``) or that did its work on an earlier run (a kernel reading only
#: constants and sizes runs once per binding of the sizes: the runtime binds such a region
#: twice, with and without those kernels): the call must skip it. A region with run-time sizes
#: (``CompiledRegion.size_names``) is bound with its sizes array as a second argument.
SequenceBinder = Callable[[list["tuple[list[Any], list[Any]] | None"]], Callable[[], None]]


@dataclass
class Kernel:
    """One call the runtime makes. ``inputs``/``outputs`` name tensors of the model (region
    inputs, outputs, intermediates) or constants of the compiled region."""

    name: str
    fn: KernelFn
    inputs: list[str]
    outputs: list[str]
    op: str = ""
    #: Estimated work, for profiles (floating-point or integer operations); 0 when unknown.
    flops: int = 0
    #: Set for a kernel that only copies its inputs, in order, into its one output, each input
    #: a contiguous byte range starting at this offset (a concatenation whose leading axes are
    #: all 1). The runtime may then place every input inside the output and skip the kernel.
    concat_offsets: list[int] | None = None
    #: Scratch bytes the kernel needs while it runs (a padded input, a packed operand). The
    #: runtime plans a buffer of this many bytes (``uint8``, on the backend's device, aligned
    #: to the device's alignment) and passes it as one extra entry after the outputs. Each
    #: execution state has its own, so concurrent runs never share one; its contents are
    #: undefined when the kernel starts. Kernels must not keep scratch memory of their own
    #: (static buffers) that concurrent calls would share.
    workspace_bytes: int = 0


def contiguous_concat_offsets(inputs: list[TensorType], output: TensorType) -> list[int] | None:
    """Byte offsets of ``inputs`` inside ``output`` when ``output`` is their concatenation along
    an axis before which every extent is 1 (each input is then one contiguous byte range of
    the output, in order), else None: what a backend puts in ``Kernel.concat_offsets``."""
    if not inputs or any(t.ndim != output.ndim or t.dtype != output.dtype for t in inputs):
        return None
    axis = next((a for a in range(output.ndim)
                 if any(t.shape[a] != output.shape[a] for t in inputs)), output.ndim)
    if axis == output.ndim and len(inputs) > 1:
        return None
    for t in inputs:
        if any(t.shape[a] != output.shape[a] for a in range(output.ndim) if a != axis):
            return None
    if axis < output.ndim and (math.prod(output.shape[:axis]) != 1
                               or sum(t.shape[axis] for t in inputs) != output.shape[axis]):
        return None
    offsets, pos = [], 0
    for t in inputs:
        offsets.append(pos)
        pos += t.nbytes
    return offsets


@dataclass
class CompiledRegion:
    """What ``Backend.compile`` returns.

    ``tensors`` types every tensor the kernels read or write other than constants (the runtime
    plans their memory on the backend's device): every region input and output with the
    region's types, and the intermediates the kernels pass between them. ``constants`` maps
    constant names to buffers already on the device. A kernel must write every region output.
    ``info`` holds facts for reports (counters, code sizes); the runtime shows it and never
    relies on it. ``handle`` is the backend's own object (a loaded library, object code, a
    kernel table) for its ``save`` and kernels: the runtime keeps it and never reads it.
    ``tessera.plugin.contract.check_compiled`` checks all of this after every ``compile`` and
    ``load``.

    ``bind_sequence`` is optional: when set, ``Module.run`` binds the region's buffers once and
    runs its kernels through the returned call, while profiles still call each kernel.

    Concurrency. ``Module.run`` may be called from many threads at once; each concurrent call
    has its own execution state, so the runtime binds a region's kernels (and sequences) once
    per state and calls them with that state's buffers. One state is never used by two
    threads at once. Kernels of a ``thread_safe`` region (the default) may therefore run
    concurrently on different buffers: they must keep no mutable state of their own (scratch
    memory comes from ``Kernel.workspace_bytes``; counters and caches need a lock). A region
    whose kernels cannot run concurrently (a simulator with one instance) sets
    ``thread_safe=False``, and the runtime then runs its kernels one call at a time.
    """

    backend: str
    region: Function
    kernels: list[Kernel]
    tensors: dict[str, TensorType]
    constants: dict[str, Any] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    bind_sequence: SequenceBinder | None = None
    thread_safe: bool = True
    handle: Any = None
    #: The model's size variables (``"batch"``, ``"seq"``) whose values the region's kernels
    #: take at run time, in the order of the sizes array; empty for a region compiled for
    #: fixed sizes. The runtime gives each execution state one ``int64`` numpy array of these
    #: values per such region, the same array object for every run of that state, and writes
    #: the call's sizes into it before each run. Each kernel is then called
    #: ``fn(inputs, outputs, sizes)`` and ``bind_sequence(buffer_lists, sizes)`` is given it
    #: too, so a backend may bind a pointer to the array once and read the sizes per call.
    size_names: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class SavedBackend:
    """What an artifact recorded about the backend that saved a region: its distribution and
    version, and the ``artifact_version`` of its files (None in artifacts older than that)."""

    name: str
    distribution: str
    version: str
    artifact_version: str | None


@dataclass
class CompileOptions:
    """Options every backend receives: the optimization level, per-pass switches, the tuning
    records (a :class:`~tessera.plugin.records.TuningHistory` or None), free-form backend
    options (e.g. ``dump_code``) and which device of each kind the module runs on
    (``devices``: kind -> index; absent: 0; see :meth:`Backend.device_instance`).

    ``schedule`` is what a backend's templates read of the records: the best config of each
    workload for the region being compiled (workload key -> knob values), resolved by the core
    for that backend and target kind before it calls ``compile`` (None without records); read
    it with :meth:`schedule_overrides`.

    ``progress`` is where a backend reports how far it got within the region it compiles
    (:class:`tessera.progress.Progress`: phase, units done of a total); the core shows it as
    a bar on a terminal and as throttled lines in a log. Every backend may report; one whose
    regions take seconds to compile should (the llvm backend reports each fused group lowered
    and each code-generation step). Outside ``compile`` it reports nowhere.

    ``subgraphs`` compiles a closed sub-graph (an ``If`` branch, a ``Loop`` or ``Scan`` body)
    for the module's own target and returns a
    :class:`~tessera.plugin.subgraphs.CompiledSubgraph`; the core sets it for every backend
    (None outside a compile or load). A backend that claims nodes holding sub-graphs runs
    them with it instead of compiling the bodies itself.

    ``kernel_cache`` is the persistent cache of compiled code
    (:class:`~tessera.plugin.kernel_cache.KernelCache`; None: off): a backend whose code
    generation is slow looks its code up there before generating it and stores what it
    generated, under a key of everything the code depends on, and says in
    ``CompiledRegion.info["kernel_cache"]`` whether it hit (``"hit"``, ``"miss"``)."""

    opt_level: int = 3
    pass_config: dict[str, Any] = field(default_factory=dict)
    tuning_records: TuningHistory | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    devices: dict[str, int] = field(default_factory=dict)
    schedule: ScheduleOverrides | None = field(default=None, compare=False, repr=False)
    #: The (backend, target) ``schedule`` was resolved for.
    schedule_for: tuple[str, str] | None = field(default=None, compare=False, repr=False)
    progress: Progress = field(default_factory=Progress, compare=False, repr=False)
    subgraphs: SubgraphCompiler | None = field(default=None, compare=False, repr=False)
    kernel_cache: KernelCache | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.tuning_records is not None and not isinstance(self.tuning_records,
                                                              TuningHistory):
            raise TypeError(f"CompileOptions.tuning_records must be a TuningHistory or None, "
                            f"not {type(self.tuning_records).__name__} (load a records file "
                            f"with TuningHistory.load, or give its path to tessera.compile)")

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (tuning workers, Ray) without ``subgraphs``: a service of the compiling
        process, not data; a worker that needs one sets its own."""
        state = dict(self.__dict__)
        state["subgraphs"] = None
        return state

    @property
    def tuned(self) -> bool:
        """Whether the module is compiled with tuning records (a backend that tunes then
        reports ``CompiledRegion.info["tuning"]``)."""
        return self.tuning_records is not None or self.schedule is not None

    def for_region(self, backend: str, target: str) -> CompileOptions:
        """A copy for one region compiled by ``backend`` for ``target`` (the kind's text),
        with ``schedule`` resolved from the records (what the core hands to ``compile``)."""
        schedule = None if self.tuning_records is None else \
            self.tuning_records.overrides(backend, target)
        return replace(self, schedule=schedule, schedule_for=(backend, target))

    def schedule_overrides(self, backend: str, target: str | None = None
                           ) -> dict[str, dict[str, Any]]:
        """The best config of each workload the tuning records hold for ``backend``
        (workload key -> knob values; records of exactly ``target`` preferred), for the
        backend's templates (``ConfigSpace.pick``); empty without records. The core resolves
        them before ``compile`` (``schedule``); called with options that were not resolved
        (a backend's own tests), they are resolved here. A backend that tunes reports what it
        used as ``CompiledRegion.info["tuning"] = {"tuned": n, "default": m}`` (templates
        whose config came from the records, and the others)."""
        if self.schedule is not None and self.schedule_for == (backend, target):
            return self.schedule
        if self.tuning_records is None:
            return {}
        return self.tuning_records.overrides(backend, target)


class Backend(ABC):
    """Base class of every backend, built-in or from a plugin package."""

    #: The target kind that selects this backend (``"llvm"``, ``"cuda"``, ``"ref"``).
    name: str = ""
    #: Where its buffers live: ``"cpu"``, ``"cuda"``, ``"vta"``, ...
    device: str = "cpu"
    #: Rank as a default CPU target: the installed, available CPU backend with the highest rank
    #: is used when no target is given ("auto").
    default_rank: int = 0
    #: Target options the backend understands (``-mcpu`` -> ``{"mcpu": "CPU name"}``): option
    #: name -> one-line description. Any other option in a target string is an error.
    options: dict[str, str] = {}
    #: Forms of its generated code that ``dump_code`` (``--dump-code``) may ask for, such as
    #: ``("ll", "asm", "tir")``; a backend that writes none leaves it empty. ``compile`` reads
    #: the requested forms from ``options.extra["dump_code"]`` and the folder from
    #: ``options.extra["dump_dir"]``.
    code_forms: tuple[str, ...] = ()
    #: The version of the files ``save`` writes. An artifact saved with another one is refused
    #: on load by default (:meth:`accepts_artifact`); change it when ``load`` can no longer
    #: read what an earlier release saved.
    artifact_version: str = "1"
    #: Whether ``compile`` takes regions with symbolic shapes (types whose dimensions are
    #: expressions over the model's size variables) and returns kernels that read the sizes
    #: at run time (``CompiledRegion.size_names``). A backend that does not gets only static
    #: regions: a symbolic model compiled for it is specialised per size (``shape_mode``).
    symbolic_extents: bool = False
    #: Whether matrix products of 8-bit integers with a constant weight (``MatMulInteger``)
    #: run faster here than the float products of their dequantized values: the graph pass
    #: ``QDQToInteger`` rewrites a QDQ model's products into them only for a target whose
    #: first backend says so (or when the pass is switched on by name).
    integer_products: bool = False

    def available(self) -> str | None:
        """None when the backend can run here, else the reason it cannot (shown to users)."""
        return None

    def available_for(self, target: TargetKind) -> str | None:
        """Like :meth:`available`, for one target kind: backends whose requirements depend on
        their options (a simulator that needs a tool only with ``-sim=tsim``) override it; it may
        raise :class:`~tessera.errors.TargetError` for an option value it does not accept.
        ``resolve_target`` calls it for every kind of a target. By default: ``available()``."""
        return self.available()

    @abstractmethod
    def claims(self, target: TargetKind) -> list[Pattern]:
        """The patterns this backend accepts under ``target`` (largest composites first)."""

    def declines(self, node: Node, target: TargetKind) -> str | None:
        """Why this backend leaves ``node`` to another backend although it claims other nodes
        of the same op (a dtype, layout or attribute its library does not handle), or None.
        The partitioner asks it for each node of an op the backend's patterns name that went
        to a backend later in the target, and the partition report lists the reasons. By
        default: None (no reason given)."""
        return None

    @abstractmethod
    def compile(self, region: Function, target: TargetKind,
                options: CompileOptions) -> CompiledRegion:
        """Compile one region (a function whose ops this backend claimed), reporting how far
        it got on ``options.progress`` (see :class:`CompileOptions`)."""

    def save(self, compiled: CompiledRegion) -> dict[str, bytes | np.ndarray]:
        """What lets ``load`` rebuild ``compiled`` without recompiling: files (a relative
        file name -> bytes) and arrays (any key -> a numpy array). The runtime stores each
        distinct array once in the artifact's shared, content-addressed constants (an array
        equal to a graph parameter or to another region's array is not stored again) and
        hands it back to ``load`` under the same key, read-only. Save constants as arrays,
        not inside files, so that they are stored once. The region graph is saved by the
        runtime (so is ``artifact_version``, checked on load by :meth:`accepts_artifact`),
        with its constants' data unless :meth:`keeps_constants` names them."""
        return {}

    def keeps_constants(self, compiled: CompiledRegion) -> Collection[str]:
        """The names of ``compiled.region``'s constants that ``save`` keeps in the form its
        kernels read (packed weights among its arrays, or values compiled into its code), so
        that ``load`` never reads their data from the region graph. The artifact stores no
        other copy of them: ``load`` gets the region with them *held* (``Value.held_by`` is
        this backend's name; reading their ``data`` raises). A module just compiled drops the
        graph's data of these constants too (unless another region reads the same value, or
        ``keep_graph_weights``), so that each weight lives once in memory: nothing of the
        compiled region may read them from the graph after ``compile``. By default: none
        (``load``, which compiles again by default, gets every constant's data)."""
        return ()

    def load(self, region: Function, files: dict[str, bytes | np.ndarray],
             target: TargetKind, options: CompileOptions) -> CompiledRegion:
        """Rebuild a compiled region from what ``save`` returned (arrays come back as
        read-only numpy arrays). By default: compile again."""
        return self.compile(region, target, options)

    def accepts_artifact(self, saved: SavedBackend) -> str | None:
        """None when :meth:`load` can read regions saved as ``saved`` describes, else the
        reason it cannot (the artifact then fails to load with it). By default: the same
        ``artifact_version``, whatever the distribution's version."""
        if saved.artifact_version is not None and saved.artifact_version != \
                self.artifact_version:
            return (f"its regions were saved in artifact version {saved.artifact_version} "
                    f"(by {saved.distribution} {saved.version}); this {self.name} backend "
                    f"({self.version()}) reads version {self.artifact_version}; compile the "
                    f"model again")
        return None

    def export_code(self, compiled: CompiledRegion, serial: bool = False) -> ExportedCode:
        """The code of ``compiled`` for a program without Python
        (:class:`~tessera.plugin.exported.ExportedCode`): relocatable, position-independent
        objects with one ``void symbol(void **args)`` per kernel; with ``serial``, code that
        starts no threads (a system without them: no pthreads). ``compile`` was given
        ``options.extra["export"]`` true, so it may keep what this needs (its IR). Raises
        :class:`~tessera.errors.ExportError` saying why a region cannot be exported. By
        default: it cannot (its kernels need Python or a device driver)."""
        raise ExportError(f"backend {self.name!r} cannot hand over its code for a program "
                          f"without Python (Backend.export_code)")

    def device_api(self) -> Device:
        """The device API for this backend's buffers."""
        return CPU

    def device_instance(self, options: CompileOptions) -> Device:
        """The device a region compiled (or loaded) with ``options`` runs on: where ``compile``
        and ``load`` put its constants and where its kernels launch (``cuda:1`` when the
        module was compiled with ``devices={"cuda": 1}``)."""
        return self.device_api().instance(options.devices.get(self.device, 0))

    def tuning_candidate(self, region: Function, kernel: str,
                         overrides: dict[str, dict[str, Any]], target: TargetKind,
                         options: CompileOptions) -> Any:
        """Kernel ``kernel`` of ``region`` (a name of ``compile``'s kernels) built alone with
        the schedule ``overrides`` (workload key -> knob values), on buffers of its own, for
        the tuner to measure: a :class:`tessera.plugin.candidate.TuningCandidate`. ``region``
        and ``options`` are what ``compile`` got. The tuner calls it in a worker process,
        never in the process that compiles, so a candidate that crashes or hangs costs one
        trial. Default: None (this backend's kernels cannot be measured alone; it is not
        tuned)."""
        return None

    def tuning_features(self, region: Function, kernel: str, configs: list[dict[str, Any]],
                        key: str, target: TargetKind, options: CompileOptions
                        ) -> list[list[float] | None] | None:
        """Features of the loop nest kernel ``kernel`` of ``region`` lowers to under each of
        ``configs`` (knob values of the workload ``key``, the task's), for the ``xgb`` tuner's
        cost model: one vector per config, in order, of the same length for every config of
        a task (:func:`tessera.tir.features.loop_features` of the lowered TIR function
        is what a backend that lowers to TIR returns), or None for a config that does not
        lower (the tuner then ranks it by its knob values alone). ``region`` and ``options``
        are what ``compile`` got. The tuner calls it in the process that tunes, not in a
        measurement worker, a few dozen configs per proposal: it must not need the device,
        and should keep what configs share (the prepared region) between calls. Default:
        None (no loop-nest features; the tuner uses the knob values alone)."""
        return None

    def peak_gflops(self, target: TargetKind) -> tuple[float, str] | None:
        """The float32 rate (GFLOP/s) the device reaches at best with code compiled under
        ``target`` and the threads its kernels use, with a one-line description of how it was
        found, for the roofline of ``tessera run --profile``; None when unknown (the default).
        It may take a moment (a measurement) and should be cached."""
        return None

    def host_threads(self) -> str | None:
        """How many host threads this backend's kernels run on and where that number came from
        (``"2 threads (CPU affinity (2 of 8 CPUs))"``), for ``tessera plugins -v`` and
        profiles; None when its kernels run no threads of their own on the host (the
        default). A backend with a host thread pool picks its default count with
        :func:`tessera.plugin.threads.default_thread_count` (the CPU affinity and cgroup
        quota, or ``TESSERA_NUM_THREADS``), and its parallel work must not wait for a thread
        the OS has descheduled (see ``docs/writing-a-backend.md``)."""
        return None

    def version(self) -> str:
        """The version of the distribution that provides this backend."""
        return distribution_version(type(self).__module__)

    def __repr__(self) -> str:
        return f"<Backend {self.name} ({self.device})>"
