"""The rack launcher's errors; rack.py re-exports them (and the splitrack package RackError).

    RackError       the rack cannot be started, found or stopped as asked; the message,
                    one line (a failed start adds the monitor's last log lines), says why
    RackAlreadyUp   a RackError: start() of a rack whose name is up already, which
                    changed nothing; `live` names its running processes
"""


class RackError(RuntimeError):
    """The rack cannot be started, found or stopped as asked; the message says why."""


class RackAlreadyUp(RackError):
    """start() of a rack whose name is up already; `live`: its running processes."""

    def __init__(self, name: str, live: list[str]):
        self.name, self.live = name, live
        super().__init__(f"rack {name!r} is already up ({', '.join(live)} running); "
                         f'Rack.attach("{name}") uses it, `splitrack down --name {name}` '
                         "stops it")
