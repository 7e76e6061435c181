"""The paper's own figures, which the plots draw as reference marks ("paper: ...").

These are what the paper ("Network in Disaggregated Datacenters") and LegoOS
(OSDI'18) measured on their testbed: kernel C, FIT over InfiniBand, NICs of
1 GbE. They are not targets (limits.py holds splitrack's own) and not this
machine's: compare shapes and ratios, not microseconds. docs/fidelity.md
says the same, and which figure is the paper's and which is derived here.
"""

# connect(): the paper's evaluation: a connect() through the nComponent took
# 255 µs, Linux's own 252 µs.
CONNECT_US = 255.0
LINUX_CONNECT_US = 252.0

# A FIT round trip on the paper's testbed, about 8 µs: LegoOS's FIT (RPC over
# InfiniBand) as the paper quotes it. (LegoOS's own paper gives 4.6 µs at 128 B
# to 6.5 µs at 4 KiB on 40 Gb/s InfiniBand.)
FIT_RTT_US = 8.0

# The nComponent's CPU: the paper's evaluation: 15 % of a core to send (tx)
# and 25 % to receive (rx) at 880 Mb/s, 1 GbE saturated.
NCOMPONENT_CORE_TX = 0.15
NCOMPONENT_CORE_RX = 0.25
NCOMPONENT_AT_MBPS = 880          # megabits per second

# Word count (the paper's Fig. 8): DDIO took the same time as Linux, with no
# message packing (packing is the paper's suggested improvement).
WORDCOUNT_DDIO_OVER_LINUX = 1.0


def core_s_per_gb(core_share: float) -> float:
    """Derived, not the paper's: a share of a core at 880 Mb/s as core-seconds
    per GB moved, the unit `bench tcp` measures: 880 Mb/s is 0.110 GB/s, so
    15 % of a core is 0.15 / 0.110 = 1.36 core-s/GB and 25 % is 2.27."""
    return core_share / (NCOMPONENT_AT_MBPS / 8 / 1000)
