#!/usr/bin/env python3
"""Starts a Tally job: one scheduler, N workers and M servers, all running one command.

    tools/launch.py -n 4 -s 2 [--launcher local|ssh|mpi|slurm] [-H hosts] command args...

Each process learns its role from DMLC_* / TALLY_* variables; docs/launch.md lists them.
The launcher owns every process it starts: when one fails, or on Ctrl-C, it stops all of
them and exits non-zero, naming the process that failed.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from launcher.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
