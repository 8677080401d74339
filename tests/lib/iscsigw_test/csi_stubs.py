"""Python modules for the CSI and gateway APIs, generated from proto/ at import.

grpc_tools.protoc (Debian python3-grpc-tools) writes csi.v1's and iscsigw.v1's message classes
and service stubs into a temporary directory that goes on sys.path, so the tests always speak the
protocol as it is in the tree. Use:

    from iscsigw_test.csi_stubs import csi_pb2, csi_grpc, gateway_pb2, gateway_grpc
"""
import atexit
import os
import shutil
import subprocess
import sys
import tempfile

from .harness import REPO

_PROTOS = ["csi/v1/csi.proto", "iscsigw/v1/state.proto", "iscsigw/v1/gateway.proto"]


def _generate():
    out = tempfile.mkdtemp(prefix="iscsigw-csi-pb2-")
    atexit.register(shutil.rmtree, out, ignore_errors=True)
    import grpc_tools
    # google/protobuf/*.proto (descriptor, wrappers, timestamp) ship inside grpc_tools.
    well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", os.path.join(REPO, "proto"),
                    "-I", well_known, "--python_out", out, "--grpc_python_out", out] + _PROTOS,
                   check=True)
    sys.path.insert(0, out)


_generate()

from csi.v1 import csi_pb2  # noqa: E402
from csi.v1 import csi_pb2_grpc as csi_grpc  # noqa: E402
from iscsigw.v1 import gateway_pb2  # noqa: E402
from iscsigw.v1 import gateway_pb2_grpc as gateway_grpc  # noqa: E402
from iscsigw.v1 import state_pb2  # noqa: E402

__all__ = ["csi_pb2", "csi_grpc", "gateway_pb2", "gateway_grpc", "state_pb2"]
