"""FIT's tunables: the RPC layer's own (splitrack/params.py has every other tunable).

FIT sits below the rest of splitrack, so its knobs live in its own package and
everything above imports them from here. Units are in the names.
"""

FIT_MAX_PAYLOAD_BYTES = 2 * 1024 * 1024   # LegoOS FIT's largest message
FIT_RING_BYTES = 4 * 1024 * 1024 + 4096   # shm: each ring of a link (a message is at most
                                          # half a ring: two of the largest fit)
FIT_POLL_US = 200                         # shm: a waiter spins this long before it sleeps
                                          # (rack.poll_us; docs/evaluation.md says why 200)
FIT_REPLY_WAIT_S = 0.1                    # shm: a reply waits this long for ring space
FIT_CALL_COPY_BYTES = 16 * 1024           # shm: a reply up to this size is read by the call's
#                                           native step (native/fitcall.h); larger, in place
FIT_HARD_LIMIT_BYTES = 64 * 1024 * 1024   # ZeroMQ drops a peer that sends more (memory guard)
FIT_CALL_TIMEOUT_S = 5.0                  # default request/reply timeout
FIT_RECONNECT_IVL_MS = 10                 # ZeroMQ reconnect interval to a peer
FIT_LINGER_MS = 0                         # unsent messages are dropped at close
FIT_HWM_MSGS = 200_000                    # ZeroMQ high-water marks (messages per queue)
FIT_REPLY_SLICE_MS = 2                    # a caller serves its inbox between slices of waiting
