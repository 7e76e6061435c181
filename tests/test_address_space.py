"""An mComponent's address space (monitors/address_space.py): its regions and checks."""

import errno

import pytest

from monitors.address_space import AddressSpace

LINE = 4096


def test_check_all_is_check_of_every_page():
    space = AddressSpace("p0", LINE)
    space.add_region(0, 4 * LINE)            # pages 0-3
    space.add_region(8 * LINE, 2 * LINE)     # pages 8-9
    space.check_all([0, 1, 2, 3, 8, 9, 3, 0])
    space.check_all(range(8, 10))
    for bad in ([0, 1, 4], [9, 10], [3, 8, 7], [-1]):
        with pytest.raises(OSError) as info:
            space.check_all(bad)
        assert info.value.errno == errno.EFAULT
        assert any(_fails(space, v) for v in bad)


def _fails(space: AddressSpace, vpage: int) -> bool:
    try:
        space.check(vpage)
    except OSError:
        return True
    return False
