"""The installed version of the ``tessera`` distribution (layer 0: imports nothing of Tessera).

Modules that record or check the version (artifact manifests, tuning records, the plugin
scaffold) import it from here rather than from the ``tessera`` package, whose ``__init__``
imports the whole compiler.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("tessera")
except PackageNotFoundError:  # running from a source tree without installing
    __version__ = "0+unknown"

__all__ = ["__version__"]
