"""Target strings, as tvmc writes them.

``"llvm -mcpu=znver3"``, ``"cuda -libs=cudnn,cublas"`` and priority lists such as
``"vta_sim, cuda -libs=cudnn, llvm"``. Kinds are separated by commas, except that a comma inside
an option value (``-libs=cudnn,cublas``) belongs to the value: a comma starts a new kind only when
the text after it begins with a kind name (no leading ``-``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tessera.errors import TargetError

if TYPE_CHECKING:
    from tessera.ir.graph import Function

_KIND = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")


@dataclass(frozen=True)
class TargetKind:
    """One entry of a target: a backend name and its ``-key=value`` options. ``fallback``
    is set on the kinds of the fallback backends (nodes no backend of the target claims): a
    backend that runs whole loops itself claims them only as a backend of the target."""

    name: str
    options: dict[str, str] = field(default_factory=dict)
    fallback: bool = field(default=False, compare=False)

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.options.get(key, default)

    def get_list(self, key: str) -> list[str]:
        """A comma-separated option as a list (``-libs=cudnn,cublas``)."""
        value = self.options.get(key, "")
        return [v.strip() for v in value.split(",") if v.strip()]

    def __str__(self) -> str:
        opts = " ".join(f"-{k}={v}" if v != "" else f"-{k}" for k, v in self.options.items())
        return f"{self.name} {opts}".strip()

    def __hash__(self) -> int:
        return hash(str(self))


@dataclass(frozen=True)
class Target:
    """A parsed target: kinds in priority order (first claims first)."""

    kinds: tuple[TargetKind, ...]

    @staticmethod
    def parse(text: str | Target) -> Target:
        if isinstance(text, Target):
            return text
        if not isinstance(text, str) or not text.strip():
            raise TargetError(f"empty target string {text!r}; expected e.g. \"llvm\" or "
                              f"\"cuda -libs=cudnn, llvm\"")
        kinds = [_parse_kind(part) for part in _split_kinds(text)]
        names = [k.name for k in kinds]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise TargetError(f"target {text!r} names {', '.join(sorted(dup))} more than once")
        return Target(tuple(kinds))

    def names(self) -> list[str]:
        return [k.name for k in self.kinds]

    def kind(self, name: str) -> TargetKind | None:
        for k in self.kinds:
            if k.name == name:
                return k
        return None

    def __str__(self) -> str:
        return ", ".join(str(k) for k in self.kinds)


def _split_kinds(text: str) -> list[str]:
    """Split at the commas that separate kinds.

    A piece continues the previous option value (``-libs=cudnn,cublas``) when the previous piece
    ends with a ``-key=value`` token and the piece follows the comma without a space:
    ``"cuda -libs=cudnn,cublas, llvm"`` is two kinds; write a space after the commas that
    separate kinds when the kind before ends with an option.
    """
    parts: list[str] = []
    for piece in text.split(","):
        if parts:
            prev_tokens = parts[-1].split()
            continues = (bool(prev_tokens) and prev_tokens[-1].startswith("-")
                         and "=" in prev_tokens[-1] and bool(piece) and not piece[0].isspace())
            if continues:
                parts[-1] += "," + piece
                continue
        parts.append(piece)
    return [p.strip() for p in parts]


def _parse_kind(text: str) -> TargetKind:
    tokens = text.split()
    if not tokens:
        raise TargetError("empty entry in target string (two commas in a row?)")
    name = tokens[0]
    if not _KIND.match(name):
        raise TargetError(f"bad target kind {name!r}: expected a backend name such as llvm")
    options: dict[str, str] = {}
    for tok in tokens[1:]:
        if not tok.startswith("-"):
            raise TargetError(f"bad option {tok!r} for target {name!r}: expected -key=value")
        key, _, value = tok.lstrip("-").partition("=")
        if not key:
            raise TargetError(f"bad option {tok!r} for target {name!r}: empty key")
        options[key] = value
    return TargetKind(name, options)


def kind_of_region(body: Function) -> TargetKind:
    """The target kind (name and options) a region was partitioned for, read back from the
    region (an artifact's graph); ``compile`` hands backends the partitioner's object."""
    text = body.attrs.get("target")
    if not text:
        return TargetKind(body.attrs["backend"])
    return Target.parse(text).kinds[0]
