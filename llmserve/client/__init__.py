"""Clients of the ensemble from outside Triton.

wire.py      the ensemble request (dict, tritonclient inputs, raw protobuf), the stop request, pieces
retry.py     the failover policy: what is retried, which server next, back-off, budget, resume
failover.py  the sync client (HTTP generate / gRPC streaming): tools/client.py, the HA tests
aio.py       the async gRPC client the OpenAI frontend uses (health checks, cancellation)
"""
