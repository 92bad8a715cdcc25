"""The relay's gRPC way to the backend: the address comes from tritonserver's own command line."""

import pytest

from llmserve.pipeline.backend_grpc import server_address


@pytest.mark.parametrize(
    "cmdline, address",
    [
        (["tritonserver", "--model-repository=/m"], "127.0.0.1:8001"),  # tritonserver's defaults
        (["tritonserver", "--grpc-port=18201", "--http-port=18200"], "127.0.0.1:18201"),
        (["tritonserver", "--grpc-port", "9001", "--model-repository", "/m"], "127.0.0.1:9001"),
        (["tritonserver", "--grpc-address=10.0.0.5", "--grpc-port=7001"], "10.0.0.5:7001"),
        (["tritonserver", "--grpc-address", "0.0.0.0"], "127.0.0.1:8001"),
    ],
)
def test_the_address_is_read_from_the_servers_flags(cmdline, address):
    assert server_address(cmdline) == address


def test_a_server_without_grpc_is_refused_with_the_reason():
    with pytest.raises(RuntimeError, match="--allow-grpc=false"):
        server_address(["tritonserver", "--allow-grpc=false"])
