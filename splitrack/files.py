"""`splitrack.files`, the name programs reach the rack's storage by: the module is
splitrack/guest/files.py (the code loaded into rack programs lives in
splitrack.guest); this name is that very module, not a copy."""

import sys

from splitrack.guest import files as _files

sys.modules[__name__] = _files
