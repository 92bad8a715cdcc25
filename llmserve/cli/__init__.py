"""Entry points: the spec-to-artefact steps and the failover client (tools/generate.py, scripts/build_engine.py,
tools/client.py and the llmserve-generate / llmserve-build-engine / llmserve-client commands)."""
