"""VTAConfig: VTA's defaults, derived sizes, JSON round trips, validation."""

from __future__ import annotations

import json

import pytest

from tessera_vta.config import DEFAULT_CONFIG, VTAConfig


def test_defaults_are_vtas() -> None:
    cfg = DEFAULT_CONFIG
    assert (cfg.batch, cfg.block_in, cfg.block_out) == (1, 16, 16)
    assert cfg.uop_depth == 8192
    assert cfg.inp_depth == 2048
    assert cfg.wgt_depth == 1024
    assert cfg.acc_depth == 2048 == cfg.out_depth
    assert (cfg.inp_elem_bytes, cfg.wgt_elem_bytes, cfg.acc_elem_bytes) == (16, 256, 64)
    assert cfg.out_elem_bytes == 16 and cfg.uop_elem_bytes == 4
    assert cfg.macs_per_cycle == 256
    assert cfg.peak_gops == pytest.approx(51.2)


#: An 8x8 core whose buffers keep every index field within VTA's bit layout.
SMALL = {"log_block": 3, "log_inp_buff_size": 14, "log_wgt_buff_size": 16, "log_acc_buff_size": 16}


def test_json_round_trip(tmp_path) -> None:
    cfg = VTAConfig(**SMALL, clock_mhz=333.0)
    assert VTAConfig.from_json(cfg.to_json()) == cfg
    path = tmp_path / "vta.json"
    cfg.save(path)
    assert VTAConfig.load(path) == cfg


def test_reads_tvm_vta_config_json() -> None:
    tvm = {
        "TARGET": "sim",
        "HW_VER": "0.0.2",
        "LOG_INP_WIDTH": 3,
        "LOG_WGT_WIDTH": 3,
        "LOG_ACC_WIDTH": 5,
        "LOG_BATCH": 0,
        "LOG_BLOCK": 4,
        "LOG_UOP_BUFF_SIZE": 15,
        "LOG_INP_BUFF_SIZE": 15,
        "LOG_WGT_BUFF_SIZE": 18,
        "LOG_ACC_BUFF_SIZE": 17,
    }
    assert VTAConfig.from_json(json.dumps(tvm)) == DEFAULT_CONFIG


def test_other_block_size_derives_depths() -> None:
    cfg = VTAConfig(**SMALL)
    assert cfg.block == 8 and cfg.macs_per_cycle == 64
    assert cfg.wgt_elem_bytes == 64 and cfg.wgt_depth == 1024
    assert cfg.inp_depth == 2048 and cfg.acc_depth == 2048


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"log_acc_width": 4}, "int32 accumulators"),
        ({"log_uop_buff_size": 16}, "uop_bgn"),
        ({"dram_bytes_per_cycle": 3}, "dram_bytes_per_cycle"),
        ({"log_block": 0}, "log_block"),
        ({"log_block": 3}, "micro-op fields need 36 bits"),
        ({"log_acc_buff_size": 18}, "micro-op fields need 33 bits"),
    ],
)
def test_invalid_configs_are_rejected(changes: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        VTAConfig(**changes)


def test_unknown_key_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown VTA configuration key 'LOG_FOO'"):
        VTAConfig.from_dict({"LOG_FOO": 1})


def test_frozen() -> None:
    with pytest.raises(AttributeError):
        DEFAULT_CONFIG.log_block = 3  # type: ignore[misc]
