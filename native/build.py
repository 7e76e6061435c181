"""cffi (API mode) build script for splitrack's C parts, one FFI per module:

    extcache_ffi   native/extcache.{h,c} -> native._extcache  (the pComponent's extCache;
                   native/victim.c                             its victim cache, its flush
                   native/xcflush.c                            and invalidate, and the
                   native/xclayout.h                           segment layout they share;
                                                               EXTCACHE below: the three)
    nring_ffi      native/nring.{h,c}    -> native._nring     (the nComponent's DRAM ring,
                   native/ddio.{h,c}                           dDDIO's copies between it and
                   native/dma.{h,c}                            extCache lines, dDMA's between
                   native/skelconnect.{h,c}                    it and an arena, and the data
                   native/skelpath.{h,c}                       plane that runs its skeletons
                                                               and their connect():
                                                               ddio.c calls extcache.c,
                                                               skelpath.c FITRING, both
                                                               built in too, with EXTCACHE)
    fitring_ffi    native/fitring.{h,c}  -> native._fitring   (FIT's shared-memory rings,
                   native/fitwait.c                            waiting on them (FITRING: the two),
                   native/fitcall.{h,c}                        a call's common case on them,
                   native/fitserve.{h,c}                       and those that know the
                   native/xcmiss.{h,c}                         header: a call's, a served
                   native/mplane.{h,c}                         message's, a channel's, an
                                                               extCache miss's, the
                                                               mComponent's page messages:
                                                               EXTCACHE built in)
    stubpath_ffi   native/stubpath.{h,c} -> native._stubpath  (a bsdSocketStub's rings through
                   native/fastrecv.{h,c}                       the nComponent, in its extCache
                                                               lines, and a native program's
                                                               recv of them without the
                                                               interpreter: EXTCACHE built in)
    rackmem_ffi    native/rackmem.h      -> native._rackmem   (a program's heap in rack memory:
                   native/pager.c, pager_link.c, pager_say.c   the userfaultfd pager and the
                   native/rackalloc.c                          allocator CPython uses, hooked in
                   native/rackpython.c                         by rackpython.c; EXTCACHE,
                                                               FITRING and fitcall.c built in)
    guest_ffi      native/guest.h        -> native._guest     (the stub's calls for a native
                                                               program: cffi's embedding API,
                                                               served by splitrack/guest/
                                                               interposer.py)

and two plain C libraries, no modules (setup.py's ext_modules: `preload`,
`preload_memory`):

    native/preload.c                     -> native._preload   (the interposer `splitrack run`
    native/preload_socket.c                                    preloads into native programs:
    native/preload_vector.c
    native/preload_fd.c                                        it starts an interpreter there
    native/preload_wait.c                                      and loads native._guest)
    native/preload_copy.c
    native/preload_stdio.c
    native/preload_signal.c
    native/preload_memory.c              -> native._preload_memory   (its malloc and mmap,
                                                               preloaded too with --memory
                                                               rack only)

The declarations come from each header itself (its preprocessor guard lines
dropped), so the header stays the one statement of the C interface.
Listed in setup.py's cffi_modules; pip builds them at install time.
"""

import os

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))


def _ffi(name: str, libraries: list[str], also: tuple[str, ...] = (),
         sources: tuple[str, ...] = (), own_source: bool = True) -> FFI:
    """Module native._<name> from <name>.h/.c; `also`: more headers and their
    sources (declared after it), `sources`: C files they call; own_source=False:
    no <name>.c (the header's functions are all in `sources`)."""
    headers = (name, *also)
    lines: list[str] = []
    for header in headers:
        with open(os.path.join(HERE, f"{header}.h")) as f:
            lines += f.read().splitlines()
    ffi = FFI()
    ffi.cdef("\n".join(line for line in lines
                       if not line.startswith(("#if", "#endif", "#include", "#define SPLITRACK_"))))
    ffi.set_source(
        f"native._{name}",
        "".join(f'#include "{header}.h"\n' for header in headers),
        sources=[os.path.relpath(os.path.join(HERE, f"{c}.c"))
                 for c in (*headers[0 if own_source else 1:], *sources)],
        include_dirs=[os.path.relpath(HERE)],
        extra_compile_args=["-O2", "-std=gnu11", "-Wall"],
        libraries=libraries,
    )
    return ffi


EXTCACHE = ("extcache", "victim", "xcflush")   # the extCache's C files, built into every user
FITRING = ("fitring", "fitwait")                # the rings' C files (fitring.h declares both's)

extcache_ffi = _ffi("extcache", ["pthread"], sources=EXTCACHE[1:])
nring_ffi = _ffi("nring", ["pthread"], also=("ddio", "dma", "fitring", "skelconnect", "skelpath"),
                 sources=(*EXTCACHE, *FITRING[1:]))
fitring_ffi = _ffi("fitring", ["pthread"], also=("fitcall", "fitserve", "xcmiss", "mplane"),
                   sources=(*EXTCACHE, *FITRING[1:]))
stubpath_ffi = _ffi("stubpath", ["pthread"], also=("fastrecv",), sources=EXTCACHE)
rackmem_ffi = _ffi("rackmem", ["pthread"], own_source=False,
                   sources=("pager", "pager_link", "pager_say", "rackalloc", "rackpython",
                            *EXTCACHE, *FITRING, "fitcall"))


def _guest() -> FFI:
    """native._guest: guest.h's functions, defined in Python (cffi's embedding API)."""
    ffi = FFI()
    with open(os.path.join(HERE, "guest.h")) as f:
        ffi.embedding_api("\n".join(line for line in f.read().splitlines()
                                     if not line.startswith(("#if", "#endif", "#include",
                                                             "#define SPLITRACK_"))))
    ffi.set_source("native._guest", '#include "guest.h"\n', include_dirs=[os.path.relpath(HERE)],
                   extra_compile_args=["-O2", "-std=gnu11", "-Wall"])
    ffi.embedding_init_code("""
from native._guest import ffi
from splitrack.guest import interposer
interposer.bind(ffi)
""")
    return ffi


guest_ffi = _guest()

if __name__ == "__main__":
    extcache_ffi.compile(verbose=True)
    nring_ffi.compile(verbose=True)
    fitring_ffi.compile(verbose=True)
    stubpath_ffi.compile(verbose=True)
    rackmem_ffi.compile(verbose=True)
    guest_ffi.compile(verbose=True)
