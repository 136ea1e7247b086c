"""Parsing ``--input-shapes`` and ``name=value`` command-line options.

``--input-shapes`` takes tvmc's syntax, ``"data:[1,3,224,224] mask:[1,128]"``, and also accepts
commas between entries (``"data:[1,3,224,224],mask:[1,128]"``). Input names may contain colons,
dots and slashes (``input:0:[1,3]`` names ``input:0``); ``[]`` is a scalar. A dimension may be
a variable name (``"input_ids:[batch,128]"``: left symbolic) or ``?`` (the model's own).
"""

from __future__ import annotations

import re

_NAME_FORBIDDEN = re.compile(r"[\s,\[\]]")
_DIM = re.compile(r"^\d+$")
_VAR = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_BOUND = re.compile(r"^([A-Za-z_][A-Za-z0-9_.\[\]]*)=(\d+)\.\.(\d+)$")
_SEPARATORS = " \t\r\n,"


class ArgumentError(ValueError):
    """A command-line argument is malformed; the message says which and why."""


def parse_input_shapes(text: str) -> dict[str, list[int | str | None]]:
    """``"data:[1,3,224,224],mask:[1,128]"`` -> ``{"data": [1, 3, 224, 224], "mask": [1, 128]}``.

    Raises :class:`ArgumentError` naming the offending part for anything else: a missing
    bracket or colon, a dimension that is not a non-negative integer, or a repeated name.
    """
    shapes: dict[str, list[int | str | None]] = {}
    pos = 0
    while True:
        while pos < len(text) and text[pos] in _SEPARATORS:
            pos += 1
        if pos >= len(text):
            break
        name, dims, pos = _parse_entry(text, pos)
        if name in shapes:
            raise ArgumentError(f"--input-shapes: input {name!r} is given twice")
        shapes[name] = dims
        if pos < len(text) and text[pos] not in _SEPARATORS:
            raise ArgumentError(f"--input-shapes: unexpected {text[pos:]!r} after the shape "
                                f"of {name!r}")
    if not shapes:
        raise ArgumentError("--input-shapes: no shapes given; expected e.g. "
                            "\"data:[1,3,224,224]\"")
    return shapes


def _parse_entry(text: str, pos: int) -> tuple[str, list[int | str | None], int]:
    """One ``name:[d0,d1,...]`` entry starting at ``pos``: name, dims, position after it."""
    expected = "expected entries like \"data:[1,3,224,224]\" separated by commas or spaces"
    bracket = text.find("[", pos)
    head = text[pos:bracket if bracket >= 0 else len(text)].rstrip()
    if bracket < 0 or not head.endswith(":"):
        raise ArgumentError(f"--input-shapes: cannot parse {text[pos:]!r}; {expected}")
    name = head[:-1].strip()
    if not name or _NAME_FORBIDDEN.search(name):
        raise ArgumentError(f"--input-shapes: bad input name {name!r} in {text[pos:]!r}; "
                            f"{expected}")
    close = text.find("]", bracket)
    if close < 0 or "[" in text[bracket + 1:close]:
        raise ArgumentError(f"--input-shapes: missing ']' after {text[pos:]!r}")
    return name, _parse_dims(name, text[bracket + 1:close]), close + 1


def _parse_dims(name: str, text: str) -> list[int | str | None]:
    if not text.strip():
        return []
    dims: list[int | str | None] = []
    for part in text.split(","):
        part = part.strip()
        if _DIM.match(part):
            dims.append(int(part))
        elif part == "?":
            dims.append(None)
        elif _VAR.match(part):
            dims.append(part)
        else:
            raise ArgumentError(f"--input-shapes: dimension {part!r} of input {name!r} is not a "
                                f"non-negative integer, a variable name (batch) or ?")
    return dims


def parse_dim_bounds(text: str) -> dict[str, tuple[int, int]]:
    """``"batch=1..64,seq=1..512"`` -> ``{"batch": (1, 64), "seq": (1, 512)}``."""
    bounds: dict[str, tuple[int, int]] = {}
    for item in re.split(r"[\s,]+", text.strip()):
        if not item:
            continue
        match = _BOUND.match(item)
        if match is None:
            raise ArgumentError(f"--dim-bounds: cannot parse {item!r}; expected entries like "
                                f"\"batch=1..64\" separated by commas")
        lo, hi = int(match.group(2)), int(match.group(3))
        if lo > hi:
            raise ArgumentError(f"--dim-bounds: {item!r}: the low bound is above the high one")
        bounds[match.group(1)] = (lo, hi)
    if not bounds:
        raise ArgumentError("--dim-bounds: no bounds given; expected e.g. \"batch=1..64\"")
    return bounds


def parse_key_value(text: str, option: str) -> tuple[str, str]:
    """``"Name=value"`` -> ``("Name", "value")``; ``option`` names the flag in errors."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ArgumentError(f"{option}: expected NAME=VALUE, got {text!r}")
    return key.strip(), value.strip()


_SWITCHES = {"on": True, "true": True, "yes": True, "1": True,
             "off": False, "false": False, "no": False, "0": False}


def parse_switch(text: str, option: str) -> bool:
    """A pass switch: ``on/off``, ``true/false``, ``yes/no`` or ``1/0`` (any case) -> bool;
    ``option`` (``"--pass-config FoldConstants"``) names the flag in the error for anything
    else."""
    value = _SWITCHES.get(text.strip().lower())
    if value is None:
        raise ArgumentError(f"{option}={text}: expected on or off (also true/false, yes/no, "
                            f"1/0)")
    return value


def parse_name_list(values: list[str] | None) -> list[str]:
    """Repeatable comma-separated lists (``--disabled-pass A,B --disabled-pass C``), flattened."""
    names: list[str] = []
    for value in values or []:
        names.extend(v.strip() for v in value.split(",") if v.strip())
    return names
