"""Virtual memory against a model: random allocs, writes, reads, flushes, invalidates
and frees on a real rack whose tiny extCache evicts all the time, each region
checked against a plain bytearray after every step (hypothesis's stateful testing).

The test process attaches itself as an emulated process of p0
(VirtualMemory.attach), exactly as a program started by `splitrack run` does.
"""

import random

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from splitrack import Rack
from splitrack.guest.vm import VirtualMemory

LINE = 4096


def _has_regions(machine):
    return bool(machine.regions)


class MemoryModel(RuleBasedStateMachine):
    """Random allocs, writes, reads, flushes, invalidates and frees against a
    plain bytearray per region; the tiny extCache evicts all the time."""

    rack: Rack = None  # set by the test

    @initialize(pages=st.integers(1, 12))
    def attach(self, pages):
        self.vm = VirtualMemory.attach(self.rack, "p0")
        self.regions: dict[int, bytearray] = {}
        self.alloc(pages)

    @precondition(lambda self: len(self.regions) < 4)
    @rule(pages=st.integers(1, 12))
    def alloc(self, pages):
        self.regions[self.vm.alloc(pages * LINE)] = bytearray(pages * LINE)

    @precondition(_has_regions)
    @rule(data=st.data())
    def write(self, data):
        addr, model = data.draw(st.sampled_from(sorted(self.regions.items())))
        off = data.draw(st.integers(0, len(model) - 1))
        length = data.draw(st.integers(1, min(len(model) - off, 9000)))
        blob = random.Random(data.draw(st.integers(0, 2**32))).randbytes(length)
        self.vm.write(addr + off, blob)
        model[off:off + len(blob)] = blob

    @precondition(_has_regions)
    @rule(data=st.data())
    def read(self, data):
        addr, model = data.draw(st.sampled_from(sorted(self.regions.items())))
        off = data.draw(st.integers(0, len(model) - 1))
        n = data.draw(st.integers(1, len(model) - off))
        assert self.vm.read(addr + off, n) == model[off:off + n]

    @precondition(_has_regions)
    @rule(data=st.data())
    def flush_and_invalidate(self, data):
        addr, model = data.draw(st.sampled_from(sorted(self.regions.items())))
        self.vm.flush(addr, len(model))
        self.vm.invalidate(addr, len(model))

    @precondition(_has_regions)
    @rule(data=st.data())
    def free(self, data):
        addr = data.draw(st.sampled_from(sorted(self.regions)))
        self.vm.free(addr)
        del self.regions[addr]

    @invariant()
    def everything_reads_back(self):
        for addr, model in getattr(self, "regions", {}).items():
            assert self.vm.read(addr, len(model)) == model

    def teardown(self):
        for addr in list(getattr(self, "regions", {})):
            self.vm.free(addr)
        if hasattr(self, "vm"):
            self.vm.close()


def test_random_operations_against_a_bytearray_model(tiny_rack):
    MemoryModel.rack = tiny_rack
    run = MemoryModel.TestCase
    run.settings = settings(max_examples=25, stateful_step_count=25, deadline=None,
                            derandomize=True, database=None,
                            suppress_health_check=list(HealthCheck))
    run().runTest()
