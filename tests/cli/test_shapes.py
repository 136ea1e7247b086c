"""Parsing of --input-shapes and the small name=value helpers of the CLI."""

from __future__ import annotations

import pytest

from tessera.cli.shapes import (
    ArgumentError,
    parse_dim_bounds,
    parse_input_shapes,
    parse_key_value,
    parse_name_list,
    parse_switch,
)


@pytest.mark.parametrize("text, expected", [
    ("data:[1,3,224,224]", {"data": [1, 3, 224, 224]}),
    ("data:[1,3,224,224],mask:[1,128]", {"data": [1, 3, 224, 224], "mask": [1, 128]}),
    ("data:[1,3,224,224] mask:[1,128]", {"data": [1, 3, 224, 224], "mask": [1, 128]}),
    (" data : [ 1, 3 ] ,  mask:[ 4 ] ", {"data": [1, 3], "mask": [4]}),
    ("input:0:[1,3]", {"input:0": [1, 3]}),
    ("model/input.1:[2,2]", {"model/input.1": [2, 2]}),
    ("scalar:[]", {"scalar": []}),
    ("zero:[0,5]", {"zero": [0, 5]}),
    ("ids:[batch,128] mask:[?,seq_len]", {"ids": ["batch", 128], "mask": [None, "seq_len"]}),
])
def test_parse_input_shapes(text: str, expected: dict[str, list[int]]) -> None:
    assert parse_input_shapes(text) == expected


@pytest.mark.parametrize("text, fragment", [
    ("", "no shapes"),
    (" , ", "no shapes"),
    ("data", "cannot parse"),
    ("data[1,3]", "cannot parse"),
    (":[1,3]", "bad input name"),
    ("data:[1,3", "missing ']'"),
    ("data:[1,-x]", "dimension '-x'"),
    ("data:[1,-1]", "dimension '-1'"),
    ("data:[1,,3]", "dimension ''"),
    ("data:[1.5]", "dimension '1.5'"),
    ("data:[1]x:[2]", "unexpected"),
    ("data:[1],data:[2]", "given twice"),
    ("a b:[1]", "bad input name"),
])
def test_parse_input_shapes_errors(text: str, fragment: str) -> None:
    with pytest.raises(ArgumentError, match="--input-shapes") as info:
        parse_input_shapes(text)
    assert fragment in str(info.value)


def test_parse_key_value() -> None:
    assert parse_key_value("FuseOps.max_depth = 4", "--pass-config") == ("FuseOps.max_depth", "4")
    assert parse_key_value("a=b=c", "--x") == ("a", "b=c")
    for bad in ("novalue", "=3"):
        with pytest.raises(ArgumentError, match="--pass-config: expected NAME=VALUE"):
            parse_key_value(bad, "--pass-config")


@pytest.mark.parametrize("text, expected", [
    ("0", False), ("1", True), ("true", True), ("False", False), ("on", True), ("OFF", False),
    ("no", False), (" yes ", True),
])
def test_parse_switch(text: str, expected: bool) -> None:
    assert parse_switch(text, "--pass-config P") is expected


@pytest.mark.parametrize("text", ["maybe", "2", "-1", "1.5", ""])
def test_parse_switch_refuses_other_values(text: str) -> None:
    with pytest.raises(ArgumentError, match=r"--pass-config P=.*: expected on or off"):
        parse_switch(text, "--pass-config P")


def test_parse_name_list() -> None:
    assert parse_name_list(None) == []
    assert parse_name_list(["A,B", " C ,", "D"]) == ["A", "B", "C", "D"]


def test_parse_dim_bounds() -> None:
    assert parse_dim_bounds("batch=1..64,seq=1..512") == {"batch": (1, 64), "seq": (1, 512)}
    for bad, fragment in (("batch=1-64", "cannot parse"), ("seq=9..3", "above"),
                          (" ", "no bounds")):
        with pytest.raises(ArgumentError, match=fragment):
            parse_dim_bounds(bad)
