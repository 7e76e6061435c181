"""Every tunable of splitrack in one place (xv6's param.h), but those of the layers below.

Units are in the names. Change a value here, not at its point of use. The
layers below this package import nothing from it, so theirs are their own:
FIT's (FIT_*: message and ring sizes, poll_us, timeouts) in fit_rpc/params.py,
and GNM's one (STICKY_MAX: processes whose NIC it remembers) in
gnm/allocation.py.
"""

# --- monitors and the launcher ----------------------------------------------
MONITOR_READY_TIMEOUT_S = 15.0            # a monitor must print READY within this
MONITOR_IDLE_CHECK_S = 0.1                # an idle monitor checks for a stop request this often
MONITOR_STOP_GRACE_S = 3.0                # SIGTERM, then SIGKILL after this
VICTIM_FLUSH_S = 0.01                     # a pMonitor with a victim cache writes its dirty
#                                           entries home this often (LegoOS: a thread woken
#                                           by each store); the spec's `victim` is 0..64
#                                           entries (native/extcache.h: XC_VICTIM_MAX)
VICTIM_MAX = 64                           # = XC_VICTIM_MAX
STOP_POLL_S = 0.02                         # how often a stopping rack looks again
HEALTH_TIMEOUT_S = 1.0                    # `splitrack status` per-component probe
UP_POLL_INTERVAL_S = 0.5                  # foreground `splitrack up` checks its monitors
LOGS_FOLLOW_POLL_S = 0.2                  # `splitrack logs -f` looks for new lines this often

# --- the network path (bsdSocketStub <-> bsdSocketSkeleton) ---------------------------
SOCKET_BUFFER_BYTES = 512 * 1024          # a stub's receive buffer in rack memory (the receive
                                          # window: ~2x the receive throughput of 128 KiB)
SOCKET_CREDIT_BYTES = 128 * 1024          # credit goes back once this much was consumed
NCOMPONENT_RING_BYTES = 128 * 1024        # each nComponent DRAM ring of a connection (rx, tx)
SOCKET_SEND_BUFFER_BYTES = 1024 * 1024    # a stub's send buffer in rack memory (the send window;
                                          # the skeleton pulls it into tx as tx drains)
SOCKET_SENT_BYTES = 256 * 1024            # the skeleton confirms pulled bytes in batches of this
SOCKET_SLOTS_PER_REGION = 8               # stub buffers per region (vm.alloc) of the runtime
PACK_GAP_S = 0.0001                       # packing: a send this soon after the last one is held
PACK_MAX_BYTES = 256 * 1024               # ... and held bytes go once this many are held
PACK_DELAY_S = 0.001                      # ... or at most this much later (the flusher)
SKELETON_RECV_CHUNK_BYTES = 256 * 1024    # at most this much per kernel recv
SKELETON_LINGER_S = 10.0                  # a closed skeleton keeps sending its data this long
STUB_LEADER_SLICE_S = 0.05               # a thread reading its process's inbox re-checks this often
STUB_FOLLOWER_SLICE_S = 0.002             # a thread waiting while another reads it, likewise
SHORTCUT_PIPE_BYTES = 1024 * 1024        # pipe shortcut: each end's SO_SNDBUF (the kernel
                                          # doubles it; root may pass net.core.wmem_max)
SHORTCUT_CONNECT_WAIT_S = 2.0             # a shortcut connect waits this long for the
                                          # listener's process, then takes the ordinary path
SHORTCUT_FIT_WINDOW_BYTES = 2 * 1024 * 1024   # FIT shortcut: bytes in flight each way (as
                                          # much as a loopback TCP connection buffers)
PEER_CHECK_S = 0.1                        # a waiting stub checks its FIT shortcut's peer
#                                           and its nComponent live
STUB_PUSH_TIMEOUT_S = 0.1                 # a stub whose inbox takes no connection in this is gone
STUB_PUSH_PATIENT_S = 2.0                 # ... or in this more, if its process is alive
STUB_SEND_PUMP_S = 0.001                  # a program that only sends reads its pushes (a
                                          # reset, credit) at least this often, when it sends
CONNECT_TIMEOUT_S = 20.0                  # connect() of a blocking socket with no timeout
NCOMPONENT_DRAM_DEFAULT = "512MiB"        # nComponent DRAM for socket buffers (spec: dram)
NCOMPONENT_DRAM_MIN_BYTES = 1 << 20       # the smallest `dram` a spec may give

# --- rack memory (`splitrack run --memory rack`, splitrack/guest/rackmem.py) -----------
RACK_HEAP_RESERVE_BYTES = 16 << 30        # a program's rack heap: its address range
RACK_HEAP_CHUNK_BYTES = 32 << 20          # the heap grows by this, reserved at its home first
MEMORY_MODES = ("host", "rack")           # splitrack run --memory (the first: the default)

# --- the rack manager (`splitrack serve`, splitrack/manager/) ------------------------
MANAGER_HOST = "127.0.0.1"                # serve binds loopback unless told otherwise
MANAGER_PORT = 8765
MANAGER_URL = f"http://{MANAGER_HOST}:{MANAGER_PORT}"
JOB_STOP_GRACE_S = 2.0                    # a stopped job's programs: SIGTERM, then SIGKILL
JOB_STOP_WAIT_S = 5.0                     # ... and their runners must have ended this later
QUEUE_RETRY_S = 1.0                       # the FIFO queue's head is tried again this often
#                                           (and whenever a slice is deleted)
MACHINE_READY_TIMEOUT_S = 5.0             # launch-machine: a pComponent knows its grant by
MACHINE_POLL_S = 0.05                     # ... asked this often
WAIT_MAX_S = 60.0                         # the longest ?wait= a GET may ask for
HISTORY_MAX = 1000                        # deleted slices and ended jobs kept in the record
PROCS_MAX = 256                           # processes of one job
HTTP_BODY_MAX_BYTES = 1 << 20             # a request body larger than this is refused (413)
CLIENT_TIMEOUT_S = 30.0                   # the CLI's HTTP calls (a DELETE may stop jobs)

# --- splitrack trace ------------------------------------------------------------
TRACE_SETTLE_S = 0.1                      # after the program: done once no record came in this
TRACE_SETTLE_MAX_S = 3.0                  # ... or after this at most
TRACE_PLOT_MAX_EVENTS = 400               # --plot draws at most this many events

# --- benchmarks ----------------------------------------------------------------
BENCH_FIT_SIZES_BYTES = (128, 4096)
BENCH_FIT_ROUNDS = 5000                   # round trips per repetition
BENCH_FIT_REPS = 5                        # repetitions, FIT and raw interleaved
BENCH_WARMUP_ROUNDS = 500
# bench tcp's rack client measures its connects after this long of them: a program
# the kernel starts on the CPU where the nMonitor spins shares that CPU until the
# scheduler's load balancing moves one of them (a few ms here), and its connect()s
# meanwhile wait for the nMonitor's own work, ~4 x slower (1 launch in 3-5 without it)
BENCH_CONNECT_WARMUP_S = 0.05
BENCH_SIZE_MAX_BYTES = 1 << 16             # bench tcp --sizes: at most this per message
GMM_POLICIES = ("least-used", "fewest-misses")   # rack.gmm_policy (monitors/registry.py)
GMM_RECHOOSE = 4                          # fewest-misses: GMM_PLACE requests one choice
#                                           serves before GMM chooses again (LegoOS's 4)
CORES_DEFAULT = 4                         # processes GPM's "pack" puts on a pComponent
                                          # whose spec gives no `cores`
