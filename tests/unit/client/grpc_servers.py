"""Scripted gRPC inference servers (tritonclient's protobufs) for the client tests: each records how the
client ended its stream."""

from __future__ import annotations

import time
from concurrent import futures

import grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc


class Answering(service_pb2_grpc.GRPCInferenceServiceServicer):
    """Answers each stream's one request with a final response and records how the stream ended:
    "half-closed" (the client closed its side and read to the end) or "cancelled"."""

    def __init__(self):
        self.ends: list[tuple[str, str]] = []

    def ModelStreamInfer(self, requests, context):
        req = next(requests)
        end = "cancelled"
        try:
            msg = service_pb2.ModelStreamInferResponse()
            msg.infer_response.id = req.id
            msg.infer_response.parameters["triton_final_response"].bool_param = True
            yield msg
            list(requests)  # returns when the client closes its side (raises if it cancels)
            end = "half-closed"
        finally:
            self.ends.append((req.model_name, end))


class Pieces(service_pb2_grpc.GRPCInferenceServiceServicer):
    """Sends `pieces` non-final responses at once (each with a text_output "x", as the ensemble's, when
    `text`), then a final one, or (stall=True) nothing more until the client cancels the stream."""

    def __init__(self, pieces: int, stall: bool, text: bool = False):
        self.pieces, self.stall, self.text, self.cancelled = pieces, stall, text, False

    def ModelStreamInfer(self, requests, context):
        req = next(requests)
        if self.stall:
            # Recorded when the RPC ends, not by this generator: a cancel that comes before gRPC asks the
            # generator for its next response leaves it suspended at its yield, never to run again (the
            # test of it flaked one run in three on a busy 2-core machine). An end at the stream's
            # deadline is not a cancel.
            def ended():
                left = context.time_remaining()
                self.cancelled = left is None or left > 1.0

            context.add_callback(ended)
        for _ in range(self.pieces):
            msg = service_pb2.ModelStreamInferResponse()
            msg.infer_response.id = req.id
            if self.text:
                out = msg.infer_response.outputs.add(name="text_output", datatype="BYTES", shape=[1])
                out.contents.bytes_contents.append(b"x")
            yield msg
        if self.stall:
            while context.is_active():  # a stalled stream ends only when the client cancels it
                time.sleep(0.01)
            return
        msg = service_pb2.ModelStreamInferResponse()
        msg.infer_response.parameters["triton_final_response"].bool_param = True
        yield msg


def served(model):
    """Start `model` on a free local port: (the grpc server, its address)."""
    server = grpc.server(futures.ThreadPoolExecutor(4))
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(model, server)
    url = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
    server.start()
    return server, url
