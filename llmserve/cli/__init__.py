"""Entry points for the spec-to-artefact steps (tools/generate.py, scripts/build_engine.py and the
llmserve-generate / llmserve-build-engine commands)."""
