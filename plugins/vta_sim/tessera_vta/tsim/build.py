"""Building the Verilog core with Verilator through pyverilator, cached on disk.

A build is keyed by a hash of the RTL sources, the C++ harness, the configuration header and
the Verilator and pyverilator versions; it lives in ``$TESSERA_VTA_CACHE`` (default
``~/.cache/tessera-vta``) under ``tsim-<hash>/`` and is reused by every later process. Builds
happen in a private folder renamed into place at the end, so concurrent builders never see a
half-built model.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from importlib import metadata
from pathlib import Path

from ..config import VTAConfig
from ..errors import TsimError, TsimUnavailable
from .rtl_config import config_header

RTL_DIR = Path(__file__).parent / "rtl"
HARNESS = Path(__file__).parent / "tsim_harness.cpp"
TOP = "vta_top"
#: C++ optimization of the Verilated model: a build of about a minute, fast enough to run.
OPT_FAST = "-O1"

INSTALL_HINT = (
    "install Verilator (apt-get install -y verilator) and pyverilator (pip install pyverilator-mm)"
)


def unavailable_reason() -> str | None:
    """Why tsim cannot run here (missing Verilator or pyverilator), or None if it can."""
    if shutil.which("verilator") is None:
        return f"the 'verilator' executable is not on PATH; {INSTALL_HINT}"
    try:
        import pyverilator  # noqa: F401
    except ImportError as err:
        return f"pyverilator cannot be imported ({err}); {INSTALL_HINT}"
    return None


def cache_root() -> Path:
    return Path(os.environ.get("TESSERA_VTA_CACHE", Path.home() / ".cache" / "tessera-vta"))


def _tool_versions() -> str:
    verilator = subprocess.run(
        ["verilator", "--version"], capture_output=True, text=True, check=False
    ).stdout.strip()
    try:
        pyverilator = metadata.version("pyverilator-mm")
    except metadata.PackageNotFoundError:
        pyverilator = "unknown"
    return f"{verilator}\npyverilator {pyverilator}\n{OPT_FAST}"


def rtl_sources() -> list[Path]:
    return sorted(RTL_DIR.glob("*.sv")) + sorted(RTL_DIR.glob("*.svh"))


def build_key(config: VTAConfig) -> str:
    """The cache key: a hash of everything that goes into the build."""
    digest = hashlib.sha256()
    for path in [*rtl_sources(), HARNESS]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(config_header(config).encode())
    digest.update(_tool_versions().encode())
    return digest.hexdigest()[:20]


def library_path(build_dir: Path) -> Path:
    """The shared library pyverilator builds (named like an executable)."""
    return build_dir / "obj" / f"V{TOP}"


def build_model(config: VTAConfig, verbose: bool = False) -> Path:
    """Build (or find in the cache) the Verilated core for ``config``; returns its library."""
    reason = unavailable_reason()
    if reason:
        raise TsimUnavailable(f"tsim is unavailable: {reason}")
    import pyverilator

    final = cache_root() / f"tsim-{build_key(config)}"
    if library_path(final).exists():
        return library_path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".build-", dir=final.parent))
    try:
        (work / "vta_config.svh").write_text(config_header(config))
        env_makeflags = os.environ.get("MAKEFLAGS")
        os.environ["MAKEFLAGS"] = f"-j{min(os.cpu_count() or 1, 2)} OPT_FAST={OPT_FAST}"
        try:
            pyverilator.PyVerilator.build(
                str(RTL_DIR / f"{TOP}.sv"),
                verilog_path=[str(RTL_DIR)],
                build_dir=str(work / "obj"),
                args=[
                    f"-I{work}",
                    f"-I{RTL_DIR}",
                    "--top-module",
                    TOP,
                    "-Wno-WIDTH",
                    "-Wno-UNUSED",
                    str(HARNESS),
                ],
                quiet=not verbose,
            )
        finally:
            if env_makeflags is None:
                os.environ.pop("MAKEFLAGS", None)
            else:
                os.environ["MAKEFLAGS"] = env_makeflags
    except subprocess.CalledProcessError as err:
        output = (err.stderr or b"").decode(errors="replace")[-4000:]
        shutil.rmtree(work, ignore_errors=True)
        raise TsimError(f"building the Verilog core failed ({err}):\n{output}") from None
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    try:
        os.rename(work, final)
    except OSError:  # another process finished the same build first
        shutil.rmtree(work, ignore_errors=True)
    return library_path(final)
