"""What the code-generating backends (llvm, cuda) share, above TE/TIR/TOPI and below the
backends.

* the graph passes only they run: fusion (:mod:`.fuse_ops`), blocked layouts
  (:mod:`.alter_layout`), grouped 1x1 convolutions as matrix products
  (:mod:`.grouped_pointwise`) and the constant-weight convolution match they share
  (:mod:`.conv_match`); ``tessera.passes.<name>`` re-exports each;
* the lowering chain (:mod:`.lowering`): region -> prepared graph -> fused groups -> TE
  computes -> a schedule per group -> TIR, with the backend's rewrites, computes, schedule
  table and TIR pipeline passed in, and the structural key under which identical groups
  share one kernel (:mod:`.group_key`);
* the group-schedule dispatch (:mod:`.schedule`): a backend's table of templates, tried in
  order, and the configs they read;
* flop counting (:mod:`.flops`) and the tuner's prepared-region cache and loop-nest features
  (:mod:`.tuning`).

(The functions ``fuse_ops`` and ``group_key`` are imported from their modules,
:mod:`tessera.kernel.fuse_ops` and :mod:`tessera.kernel.group_key`; the package does not
re-export them, so that the names keep meaning the modules.) A backend keeps its schedules,
its TIR pipeline, its code generator and its device code.
"""

from tessera.kernel.flops import group_flops
from tessera.kernel.fuse_ops import FusedGroup, format_groups
from tessera.kernel.lowering import (
    LOWER_PHASE,
    group_facts,
    group_te,
    group_text,
    loop_nest,
    lower_groups,
    lowering_errors,
    prepare_region,
)
from tessera.kernel.schedule import (
    KEEP_AT_ROOT,
    GroupContext,
    GroupSchedule,
    ScheduleTable,
    Template,
    pick,
    single_output,
)
from tessera.kernel.tuning import PreparedRegions, config_features

__all__ = [
    "KEEP_AT_ROOT", "LOWER_PHASE", "FusedGroup", "GroupContext", "GroupSchedule",
    "PreparedRegions", "ScheduleTable", "Template", "config_features", "format_groups",
    "group_facts", "group_flops", "group_te", "group_text", "loop_nest",
    "lower_groups", "lowering_errors", "pick", "prepare_region", "single_output",
]
