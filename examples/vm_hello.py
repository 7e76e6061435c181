"""A program whose memory lives in the rack: run it on a pComponent with

    splitrack run --on p0 -- python examples/vm_hello.py

It allocates a region (GMM picks the home mComponent), writes through p0's
extCache, flushes the dirty lines to the mComponent, drops them from the cache,
and reads them back (now a miss served by the mComponent). The counters show
each step: a zero-fill on first touch, a fetch after the invalidate.
"""

from splitrack import vm

addr = vm.alloc(64 * 1024)
vm.write(addr, b"hello from the split kernel")
print("flushed lines:", vm.flush(addr, 64 * 1024))
vm.invalidate(addr, 64 * 1024)
print(bytes(vm.read(addr, 27)).decode())
print(vm.counters())
vm.free(addr)
