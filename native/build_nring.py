"""cffi (API mode) build script for the nComponent's DRAM ring: native/nring.{h,c} -> native._nring.

The declarations come from nring.h itself (its preprocessor guard lines
dropped), so the header stays the one statement of the C interface.
Listed in setup.py's cffi_modules; pip builds it at install time.
"""

import os

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))


def _declarations() -> str:
    with open(os.path.join(HERE, "nring.h")) as f:
        lines = f.read().splitlines()
    return "\n".join(line for line in lines
                     if not line.startswith(("#if", "#endif", "#include", "#define SPLITRACK_")))


ffi = FFI()
ffi.cdef(_declarations())
ffi.set_source(
    "native._nring",
    '#include "nring.h"',
    sources=[os.path.relpath(os.path.join(HERE, "nring.c"))],
    include_dirs=[os.path.relpath(HERE)],
    extra_compile_args=["-O2", "-std=gnu11", "-Wall"],
)

if __name__ == "__main__":
    ffi.compile(verbose=True)
