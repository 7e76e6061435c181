"""Rack sockets handed to a program that subprocess starts, where no fork() hook runs.

subprocess.Popen starts a program through _posixsubprocess.fork_exec: C code
forks and exec()s with no Python in between, so the fork hooks that make a
child's inherited rack sockets work (forked.py) never run. A rack socket given
to the new program as its stdin, stdout or stderr, or in pass_fds (an
inetd-style server in Python: `Popen(["tr", "a-z", "A-Z"], stdin=conn,
stdout=conn)`), would reach it as a bare bell descriptor (bell.py): its reads
would find nothing, its writes would be lost, and the parent's close would
end the connection under it. So rsocket.install() puts fork_exec below in
_posixsubprocess's and subprocess's place:

- if none of the descriptors the new program keeps is a rack socket's, the
  call is subprocess's own, untouched;
- else, as at a fork: a twin of each of those handles in this process (so a
  connection stays open while the program holds it, even once the caller
  closed its own), and a channel whose end the new program keeps, named in
  its environment by forked.CHANNEL_ENV as "fd:^PID:TOKEN:,dev.ino,...,"
  (PID: this process, as the new one's pid is not known before fork_exec
  returns; TOKEN: a pipe that holds one byte; then the sockets' inodes).
  The program takes those descriptors back on its first call on one, as an
  image a fork()ed child exec()s does (native/preload.c, forked.inherit),
  and a thread of this process serves its calls until it ends
  (fork_server.serve_child). It claims the channel first, by reading the
  token's byte: so the program a shell runs for `Popen("tr a-z A-Z",
  shell=True, stdin=conn)` (the shell's child) may be the one, if the shell
  makes no call on them, and only one process ever is. A standard stream
  left to the new program as it is (None in Popen) counts too:
  `os.dup2(conn.fileno(), 1)`, then Popen;
- while fork_exec runs, the calls of the child it forks (or vforks, sharing
  this thread's memory) are the kernel's, unseen by the interposer
  (`sr_spawning`: its dup2s and closes must change nothing here);
- a fork()ed child (or an image it exec()ed) cannot pass the rack sockets it
  inherited on (forked.py): EOPNOTSUPP from Popen, rather than a program
  whose bytes are lost.

Popen's other way to start a program, os.posix_spawn (`close_fds=False` with
an absolute path), is turned off (subprocess._USE_POSIX_SPAWN), so every
Popen comes through here. os.posix_spawn called directly is not covered.
"""

import _posixsubprocess
import errno
import fcntl
import os
import socket
import subprocess
from typing import Any

from splitrack.guest import forked, handles, preloaded
from splitrack.guest.fork_server import NO_PIDFD, close_twin
from splitrack.guest.runtime import current

_kernel_fork_exec = _posixsubprocess.fork_exec
_kernel_posix_spawn = subprocess._USE_POSIX_SPAWN
_KEEP, _ENV, _STDIO = 3, 5, (6, 9, 11)   # fork_exec's arguments: pass_fds, env, and the
                                         # descriptors that become stdin, stdout, stderr


def fork_exec(*args: Any) -> int:
    given = {fd for fd in (*args[_KEEP], *(args[i] for i in _STDIO)) if fd >= 0}
    if any(forked.inherited(fd) for fd in given):
        raise OSError(errno.EOPNOTSUPP, "a rack socket passes one fork() only")
    kept = given | {std for std, i in enumerate(_STDIO) if args[i] < 0}   # (-1: its own)
    rack = {fd for fd in kept if handles.shared_state(fd) is not None}
    rt = current()
    theirs = forked.twins(rt, rack) if rack and rt is not None else {}
    if not theirs:
        return _kernel(*args)
    made: list[int] = []   # the channel's ends and the token pipe's, closed here at the end
    mine = None
    try:
        pair = socket.socketpair()
        mine = pair[0]
        made.append(pair[1].detach())
        token, put = os.pipe()
        made += [token, put]
        os.write(put, forked.SPAWN_TOKEN)   # (one byte: the first process to read it claims)
        os.set_blocking(token, False)
        made.append(fcntl.fcntl(made[0], fcntl.F_DUPFD_CLOEXEC, 3))   # (above stdio's
        made.append(fcntl.fcntl(token, fcntl.F_DUPFD_CLOEXEC, 3))     # numbers, which the
        child, token = made[-2:]                                      # child's dup2s take)
        args = list(args)
        args[_KEEP] = tuple(sorted({*args[_KEEP], child, token}))
        inodes = "".join(f"{dev}.{ino}," for dev, ino in {handles.inode(fd) for fd in theirs})
        args[_ENV] = _with_channel(args[_ENV], f"{child}:^{os.getpid()}:{token}:,{inodes}")
        pid = _kernel(*args)
    except BaseException:
        if mine is not None:
            mine.close()
        for twin in theirs.values():
            close_twin(twin)
        raise
    finally:
        for fd in made:
            os.close(fd)
    try:   # (now: Popen may reap a child whose exec failed)
        pidfd = os.pidfd_open(pid)
    except OSError:
        pidfd = NO_PIDFD   # served until the channel's end
    forked.serve(rt, mine, theirs, pidfd)
    return pid


def _kernel(*args: Any) -> int:
    """subprocess's own fork_exec; the child it forks (or vforks: this thread's memory)
    makes the kernel's calls only, through the interposer (its dup2s, closes)."""
    spawning = preloaded.call("sr_spawning")
    if spawning is None:
        return _kernel_fork_exec(*args)
    spawning(1)
    try:
        return _kernel_fork_exec(*args)
    finally:
        spawning(0)


def _with_channel(env: list[bytes] | None, channel: str) -> list[bytes]:
    """The new program's environment (None: this one's) naming its channel."""
    name = forked.CHANNEL_ENV.encode()
    if env is None:
        env = [k + b"=" + v for k, v in os.environb.items()]
    return [e for e in env if e.split(b"=", 1)[0] != name] + [name + b"=" + channel.encode()]


def install() -> None:
    _posixsubprocess.fork_exec = subprocess._fork_exec = fork_exec
    subprocess._USE_POSIX_SPAWN = False


def uninstall() -> None:
    _posixsubprocess.fork_exec = subprocess._fork_exec = _kernel_fork_exec
    subprocess._USE_POSIX_SPAWN = _kernel_posix_spawn
