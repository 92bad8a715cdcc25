"""Load generation and measurement against the ensemble, the token-level model, or the engine in-process."""
