"""monitors: one monitor process per component kind.

    core.py        the life every monitor shares (bind, register, serve, stop)
    gmonitor.py    global: GPM, GMM, GSM (registry.py) and GNM (gnm/)
    pmonitor.py    pComponent (extCache, processes; launching.py: its launch socket)
    mmonitor.py    mComponent (address_space.py: regions and page tables;
                   miss_plane.py: its data plane, the hot page messages in C)
    nmonitor.py    nComponent (its loop plane_loop.py, its ops skeleton_ops.py, a
                   skeleton's life skeleton_lifecycle.py; its data paths
                   data_paths.py over the regions it maps, rack_memory.py)
    smonitor.py    sComponent (storage_root.py)
    slices.py      the slice table (pure data): which component is granted to which slice
    __main__.py    `python -m monitors --run-dir D --id ID`

Monitors never import each other; they talk through FIT (fit_rpc/).
"""
