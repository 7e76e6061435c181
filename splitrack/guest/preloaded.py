"""The native interposer's own calls, where `splitrack run` preloaded it (native/preload.c).

The interposer exports a few functions for the Python code in a rack program
to tell it things: sr_interpose (a descriptor C code takes over), sr_own (a
socket object's descriptor), sr_spawning (subprocess is starting a program),
sr_heap_on (the rack heap is on). A Python started without the preload
(outside `splitrack run`) has none of them, and has nothing to tell.

    call(name) -> the function (ctypes), or None where the interposer is not loaded
"""

import ctypes
import functools
from typing import Any


@functools.cache
def call(name: str) -> Any:
    try:
        return getattr(ctypes.CDLL(None), name)
    except AttributeError:
        return None
