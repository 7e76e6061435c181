"""splitrack.guest: the code that runs inside a rack program.

`splitrack run` starts a program as a process of a pComponent with
_dropin/ first on its PYTHONPATH; its sitecustomize.py installs the rack's
socket class (rsocket.py) before the program's first line. From then on the
program's process holds, besides its own code:

    runtime.py     the process's part of the rack: its FIT endpoint and inbox,
                   its socket buffers, routing (GNM), the reader of pushes
    stub.py        the bsdSocketStub: the socket API of a rack socket, and the
                   connection's state; its parts in connecting.py (connect),
                   listening.py (bind, listen, accept), receiving.py (recv),
                   sending.py (send), shortcuts.py (the intra-rack shortcuts'
                   connect and accept), sockopts.py (options), bell.py
                   (fileno()'s readiness), sockargs.py (what the API takes and
                   says), handles.py (dup, fromfd, detach), closing.py
                   (shutdown, close), forked.py (a socket shared across fork:
                   fork_server.py the parent's side, fork_channel.py the channel)
    datagram.py    a UDP socket's bsdSocketStub: datagrams as records over the
                   same path
    face.py        the door into a stub that its paths and the runtime use
                   (`stub._face`: nothing of theirs is on the socket a program sees)
    datapath.py    the interface a connection's data path implements:
    nic_path.py      through an nComponent's bsdSocketSkeleton (DMA or DDIO)
    pipe_path.py     a shortcut on one pComponent (a pipe)
    fit_path.py      a shortcut between two (a FIT channel of the two stubs')
    vm.py          rack memory: regions at mComponents behind the extCache
                   (public as `splitrack.vm`); faulting.py, its miss path;
                   line_miss.py, a line's miss to its home in one native call
    files.py       the rack's storage, the sComponents (public as `splitrack.files`)

Nothing here is imported by the front door's processes but vm and files (a
client reaches them too: `splitrack cp`, the selftest). The monitors never
import this package: they talk to it in FIT messages (docs/protocol.md).
"""
