"""splitrack.guest: the code that runs inside a rack program.

`splitrack run` starts a program as a process of a pComponent with
_dropin/ first on its PYTHONPATH; its sitecustomize.py installs the rack's
socket class (rsocket.py) before the program's first line. From then on the
program's process holds, besides its own code:

    runtime.py     the process's part of the rack: its FIT endpoint and inbox,
                   its socket buffers, routing (GNM), the reader of pushes
    stub.py        the bsdSocketStub: the socket API of a rack socket, and the
                   connection's state; its parts in connecting.py (connect),
                   sockopts.py (options), bell.py (fileno()'s readiness),
                   sockargs.py (what the API takes and says), handles.py (dup,
                   fromfd, detach)
    nic_path.py    the data path through an nComponent's bsdSocketSkeleton (DMA
                   or DDIO); shortcuts.py the intra-rack shortcuts (a pipe on one
                   pComponent, a FIT channel between two) and their data paths
    vm.py          rack memory: regions at mComponents behind the extCache
                   (public as `splitrack.vm`)
    files.py       the rack's storage, the sComponents (public as `splitrack.files`)

Nothing here is imported by the front door's processes but vm and files (a
client reaches them too: `splitrack cp`, the selftest). The monitors never
import this package: they talk to it in FIT messages (docs/protocol.md).
"""
