"""Helpers shared by Tally's Python tests (tests/*/*_test.py).

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from testutil import free_port, read_tensors  # tests/testutil.py

    port = free_port()                             # for DMLC_PS_ROOT_PORT
    tensors, meta = read_tensors(prefix + "-0001.params")
"""
import json
import socket
import struct


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on now (the kernel's choice)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_tensors(path):
    """{name: raw bytes} and the metadata of a safetensors file."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    return {k: data[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in header.items()}, meta
