#!/usr/bin/env python3
"""Failover client CLI for the ensemble (llmserve/cli/client.py over llmserve/client/failover.py; also
`llmserve-client`): several endpoints or the load balancer, safe retries, and streams resumed on another
server when one breaks.

    python tools/client.py "What is the capital of France?" --max-tokens 32 --url localhost:8000
    python tools/client.py "Write a haiku." --stream --url host1:8000 --url host2:8000 --spec specs/default.yaml
    python tools/client.py "Write a haiku." --stream --grpc --url localhost:8001
"""

import sys

from llmserve.cli.client import main

if __name__ == "__main__":
    sys.exit(main())
