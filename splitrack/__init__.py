"""splitrack: an emulated LegoOS-style split-kernel rack with network components.

The public face. What a user touches:

    with splitrack.Rack() as rack:          # the embedded default rack
        print(rack.status())

`Rack` starts the rack's monitor processes and always stops them (only those it
started). `load_spec` reads and validates a TOML rack spec. `__version__` is the
installed distribution's version (importlib.metadata). Attributes are
imported lazily so that low layers (fit_rpc, monitors) may import
`splitrack.params` without pulling in the launcher.
"""

from typing import Any

__all__ = ["Rack", "RackError", "SpecError", "load_spec", "default_spec", "__version__"]

_LAZY = {
    "Rack": "splitrack.rack",
    "RackError": "splitrack.rack",
    "SpecError": "splitrack.spec",
    "load_spec": "splitrack.spec",
    "default_spec": "splitrack.spec",
}


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("splitrack")
        except PackageNotFoundError:   # a source tree that was never installed
            return "unknown"
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'splitrack' has no attribute {name!r}")
