"""gnm: the Global Network Manager (NIC registry, allocation, rack locality).

GNM runs inside the global process (monitors/gmonitor.py), beside GPM, GMM
and GSM; this package holds its logic, free of any transport.
"""

from gnm.allocation import POLICIES, NicAllocator, split_process_id
from gnm.nic_registry import NicRegistry, parse_ip

__all__ = ["POLICIES", "NicAllocator", "NicRegistry", "parse_ip", "split_process_id"]
