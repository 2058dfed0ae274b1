"""Tally's parameter server from Python (docs/python.md).

    import tally                            # a scheduler or server runs its role here
    kv = tally.kv.create("dist_sync")       # a worker joins the job
    kv.init(0, weights)
    kv.pushpull(0, grads, out=weights)    # returns with the new weights in place

Like MXNet's `import mxnet`: in a process that tools/launch.py started as a scheduler or a
server (DMLC_ROLE), importing tally runs that role until the job ends and then exits the
process with the role's status, so one script serves every role of a job unchanged. A
worker, or a process outside any job, imports normally.
"""
import os
import sys

from . import _tally
from ._tally import TallyError, resnet50_key_sizes
from . import kv

__all__ = ["kv", "TallyError", "resnet50_key_sizes"]


def _run_role_if_any():
    role = os.environ.get("DMLC_ROLE", "")
    if role in ("scheduler", "server"):
        sys.stdout.flush()
        sys.exit(_tally.run_role())


_run_role_if_any()
