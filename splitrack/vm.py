"""`splitrack.vm`, the name programs import rack memory by: the module is
splitrack/guest/vm.py (the code loaded into rack programs lives in splitrack.guest);
this name is that very module, not a copy."""

import sys

from splitrack.guest import vm as _vm

sys.modules[__name__] = _vm
