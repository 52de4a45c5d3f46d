"""What the engines' worker tests send to worker processes: graph transforms that kill the worker running them,
and a unit function that echoes its payload.

They live here, not in a test module, because a worker process unpickles them by module name: ``support`` is on
the path of every worker (pytest's ``pythonpath``), while a test module imported in importlib mode is not.
"""

import os
import signal
from pathlib import Path

from torch_geometric.transforms import BaseTransform


class Deadly(BaseTransform):
    """Kills its worker when it meets a graph whose label is a key of ``deaths``: ``"exit"`` (``os._exit``),
    ``"kill"`` (SIGKILL, as the out-of-memory killer does) or ``"segv"`` (SIGSEGV, a native crash); always while
    the file ``armed`` exists, or (``"once"``) only the first time (``marker`` records it). Otherwise the
    identity."""

    def __init__(self, deaths: dict, armed: str, marker: str) -> None:
        self.deaths, self.armed, self.marker = deaths, armed, marker

    def forward(self, data):
        how = self.deaths.get(float(data.y[0]))
        if how is None or not os.path.exists(self.armed):
            return data
        if how == "once":
            if os.path.exists(self.marker):
                return data
            Path(self.marker).touch()
            how = "exit"
        if how == "exit":
            os._exit(17)
        os.kill(os.getpid(), signal.SIGKILL if how == "kill" else signal.SIGSEGV)
        return data


class DieOnce(BaseTransform):
    """Kills its own worker process (``os._exit``) when it meets graph ``victim``: once (the ``marker`` file says
    it already did), or every time while the file ``armed`` exists. Otherwise the identity."""

    def __init__(self, marker: str, victim: float, armed: str = "") -> None:
        self.marker, self.victim, self.armed = marker, victim, armed

    def forward(self, data):
        if bool((data.y == self.victim).any()) and (
                not os.path.exists(self.marker) or self.armed and os.path.exists(self.armed)):
            Path(self.marker).touch()
            os._exit(17)
        return data


def echo_unit(unit, payload):
    """A unit function: says which unit and payload it got, in which process."""
    return {"unit": unit, "payload": payload, "pid": os.getpid()}
