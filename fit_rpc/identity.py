"""FIT identities: the ids endpoints claim, and what the kernel must vouch for them.

An endpoint's id is one of:
    global                 the global process (GPM, GMM, GSM, GNM)
    pN, mN, nN, sN         a component's monitor
    pN.PID                 an emulated process of pComponent pN, OS pid PID
    cli.PID.N              a client outside the components (the CLI, a test), pid PID

On the shm transport a peer's id is fixed when its connection is made, never
read from a field the sender fills in (docs/protocol.md, "Identities"):
- at the rendezvous, a claim that names a pid (pN.PID, cli.PID.N) must name
  the connector's own pid, as SO_PEERCRED reports it (`check_claim`);
- a claim of a component id is vouched for on its first message by the
  endpoint's owner (`Endpoint.vouch`): its pid must be the one `global`
  registered for that id; and pN.PID must be a process pN tracks.
A connector checks the listener likewise: the pid in its address (shm://PATH#PID)
or in the id it wants to reach (`expected_pid`).
"""

import re

_PROCESS = re.compile(r"(p\d{1,4})\.(\d{1,10})")
_CLIENT = re.compile(r"cli\.(\d{1,10})(?:\.\d{1,10})*")
_COMPONENT = re.compile(r"global|[pmns]\d{1,4}")


def process_of(claim: str) -> tuple[str, int] | None:
    """(pN, PID) of an emulated process's id, else None."""
    m = _PROCESS.fullmatch(claim)
    return (m.group(1), int(m.group(2))) if m else None


def is_component(claim: str) -> bool:
    return _COMPONENT.fullmatch(claim) is not None


def kind_of(claim: str) -> str:
    """The component kind an id names: global, p, m, n, s, process or client."""
    if claim == "global":
        return "global"
    if _COMPONENT.fullmatch(claim):
        return claim[0]
    if _PROCESS.fullmatch(claim):
        return "process"
    if _CLIENT.fullmatch(claim):
        return "client"
    return "unknown"


def claimed_pid(claim: str) -> int | None:
    """The pid an id names itself (pN.PID, cli.PID.N), else None."""
    m = _PROCESS.fullmatch(claim)
    if m:
        return int(m.group(2))
    m = _CLIENT.fullmatch(claim)
    return int(m.group(1)) if m else None


def check_claim(claim: str, pid: int) -> str | None:
    """Why a connector of this pid may not claim this id (None: it may, so far)."""
    if not isinstance(claim, str) or kind_of(claim) == "unknown":
        return f"{claim!r} is no FIT id"
    named = claimed_pid(claim)
    if named is not None and named != pid:
        return f"pid {pid} claims to be {claim}"
    return None


def address_pid(address: str) -> int | None:
    """The listener's pid an shm address names (shm://PATH#PID), else None."""
    _, sep, tail = address.rpartition("#")
    tail = tail.split("!", 1)[0]
    return int(tail) if sep and tail.isdigit() else None


def expected_pid(peer: str, address: str) -> int | None:
    """The pid the listener for `peer` at `address` must have; ValueError if the
    id and the address disagree (an inbox that is not the peer's own)."""
    named, at = claimed_pid(peer), address_pid(address)
    if named is not None and at is not None and named != at:
        raise ValueError(f"{address} is not the inbox of {peer}")
    return named if named is not None else at
