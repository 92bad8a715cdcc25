"""How errors that come back over BLS (all INTERNAL there) are told apart by the unary twins."""

from llmserve.errors import is_request_error, is_unavailable


def test_capacity_and_timeout_messages_are_unavailable():
    for m in ("in ensemble 'ensemble', server busy: 4 requests already wait for the engine",
              "[request id: 7] Exceeds maximum queue size", "engine unavailable: 3 engine steps failed in a row",
              "Stub process 'tensorrt_llm_0_0' is not healthy.",
              "timeout: request exceeded serving.request_timeout_s (3 s) and was cancelled"):
        assert is_unavailable(m) and not is_request_error(m), m


def test_client_errors_are_not_unavailable():
    for m in ("invalid max_tokens: must be in [1, 256], got 400", "invalid stop_words_list: token ids must lie in"):
        assert is_request_error(m) and not is_unavailable(m), m
