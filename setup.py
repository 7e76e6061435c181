from setuptools import Extension, setup

# native/build.py says what each is. The preload is a plain C library (no module):
# it does not link the interpreter, it starts one (native/preload.c, whose head lists
# its files). preload_memory.c, its malloc and mmap for --memory rack, is a library of
# its own, preloaded only then (splitrack/native_run.py): a program's allocator stays
# its own otherwise (glibc's, or jemalloc's in redis-server).
_C = {"include_dirs": ["native"], "extra_compile_args": ["-O2", "-std=gnu11", "-Wall"],
      "libraries": ["dl", "pthread"]}
preload = Extension("native._preload",
                    sources=["native/preload.c", "native/preload_socket.c", "native/preload_fd.c",
                             "native/preload_vector.c", "native/preload_wait.c",
                             "native/preload_copy.c",
                             "native/preload_stdio.c", "native/preload_signal.c"], **_C)
preload_memory = Extension("native._preload_memory", sources=["native/preload_memory.c"], **_C)

setup(cffi_modules=["native/build.py:extcache_ffi", "native/build.py:nring_ffi",
                    "native/build.py:fitring_ffi",
                    "native/build.py:stubpath_ffi", "native/build.py:rackmem_ffi",
                    "native/build.py:guest_ffi"],
      ext_modules=[preload, preload_memory])
