"""The rack manager (FlowOS-RM's role): slices of a shared rack, their jobs,
and the REST API that `splitrack serve` runs (docs/slices.md)."""
