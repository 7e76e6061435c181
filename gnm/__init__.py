"""gnm: the Global Network Manager (NIC registry, allocation, rack locality).

GNM runs inside the global process (monitors/gmonitor.py), beside GPM, GMM
and GSM; this package holds its logic, free of any transport.
"""

from gnm.nic_registry import NicRegistry, parse_ip

__all__ = ["NicRegistry", "parse_ip"]
