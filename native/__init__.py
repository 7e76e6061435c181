"""native: the C parts of splitrack, built with cffi in API mode at install time.

    extcache.h / extcache.c     the pComponent's extCache (shared-memory, set-associative)
    build_extcache.py           the cffi build script (setup.py: cffi_modules)
    extcache.py                 the Python binding: maps a segment, raises on C errors
"""
