"""An OpenAI-compatible API (/v1/chat/completions, /v1/completions, /v1/models) in front of the
Triton servers: FastAPI + uvicorn, gRPC streaming to the ensemble with failover and stream resume.

    app.py       HTTP routes, SSE, errors in OpenAI's format, client hang-up
    access.py    the request id (X-Request-Id in and out, sent on to Triton) and one access line per request
    protocol.py  request models: what is honoured, what is refused (400 naming the field)
    prompts.py   chat template, exact prompt token count, token budget
    tools.py     response_format and tools: the engine's guide, tools in the template, tool calls out
    completion.py  a request's choices (n, best_of, prompt lists): parallel engine requests, merged
    choices.py   one choice's deltas (text or tool calls, log probs, finish reason) and their merge
    tokens.py    token ids -> OpenAI's token text and bytes
    service.py   one engine request: ensemble inputs, usage, finish reason, metrics; gRPC to the ensemble
                 across servers through llmserve/client/aio.py (health, retry, resume, cancellation)
    metrics.py   Prometheus (vLLM's names under llmserve_api_)
    errors.py    errors in OpenAI's format, and the answer for each failure of the ensemble client
    auth.py      optional Bearer keys
    config.py    settings from the spec's `openai:` section
    workers.py   several worker processes on one port (uvicorn's supervisor), metrics added up across them
    (the frontend as a child process of serve.py, cluster.py and the tests: llmserve/deploy/frontend.py)
"""
