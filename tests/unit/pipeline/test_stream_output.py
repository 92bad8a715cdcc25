"""pipeline/stream_output.py: the token-level responses every `tensorrt_llm` model sends (torch
engine, relay, stand-in), packed in one place."""

from llmserve.contract import CONTEXT_TOKENS
from llmserve.pipeline.stream_output import TokenStream, token_outputs


def ids(out):
    return out["output_ids"].reshape(-1).tolist()


def test_tensors_have_the_backends_shapes():
    out = token_outputs([4, 5, 6], [-0.5, -0.25, -0.25], -1.0, context=[1, 2])
    assert out["output_ids"].shape == (1, 1, 3) and out["output_ids"].dtype.name == "int32"
    assert out["sequence_length"].tolist() == [[3]]
    assert out["cum_log_probs"].tolist() == [[-1.0]] and out["output_log_probs"].shape == (1, 1, 3)
    assert out["output_context_ids"].tolist() == [[[1, 2]]]
    assert set(token_outputs([])) == {"output_ids", "sequence_length"}  # no log probs, no context: the backend's
    assert token_outputs([]).get("output_ids").shape == (1, 1, 0)


def test_prompt_first_unless_excluded_and_context_before_each_chunk():
    stream = TokenStream([1, 2, 3], exclude_input_in_output=False)
    first = stream.chunk([7], [-0.5], final=False)
    assert ids(first) == [1, 2, 3, 7] and first["output_context_ids"].size == 0
    assert first["output_log_probs"].reshape(-1).tolist() == [0.0, 0.0, 0.0, -0.5]  # the prompt has none
    second = stream.chunk([8, 9], [-0.25, -0.25], final=True)
    assert ids(second) == [8, 9] and second["output_context_ids"].reshape(-1).tolist() == [1, 2, 3, 7]
    assert second["cum_log_probs"].tolist() == [[-1.0]]  # running total of the generated tokens
    assert ids(TokenStream([1, 2, 3], True).chunk([7], [0.0], False)) == [7]


def test_context_is_the_last_tokens_only():
    stream = TokenStream([], True)
    stream.chunk(list(range(100, 100 + CONTEXT_TOKENS + 5)), [0.0] * (CONTEXT_TOKENS + 5), False)
    nxt = stream.chunk([1], [0.0], True)
    assert nxt["output_context_ids"].reshape(-1).tolist() == list(range(105, 100 + CONTEXT_TOKENS + 5))


def test_nothing_to_say_is_none_but_a_request_always_answers_once():
    stream = TokenStream([1, 2], exclude_input_in_output=True)
    assert stream.chunk([], [], final=False) is None
    empty = stream.chunk([], [], final=True)  # ended before any token: one, empty, chunk
    assert ids(empty) == [] and empty["sequence_length"].tolist() == [[0]]
    stream = TokenStream([], True)
    stream.chunk([5], [0.0], final=False)
    assert stream.chunk([], [], final=True) is None  # said everything already: the caller just closes


def test_log_probs_left_out_on_request():
    out = TokenStream([], True).chunk([5], [0.0], final=True, with_logprobs=False)
    assert set(out) == {"output_ids", "sequence_length", "output_context_ids"}


def test_top_log_probs_travel_with_their_tokens():
    stream = TokenStream([1, 2], exclude_input_in_output=False, top_k=2)
    out = stream.chunk([7], [-0.5], final=False, top=([[7, 9]], [[-0.5, -1.5]]))
    assert out["top_token_ids"].tolist() == [[[-1, -1], [-1, -1], [7, 9]]]  # the prompt's rows: none
    assert out["top_log_probs"].shape == (1, 3, 2) and out["top_log_probs"][0, 2].tolist() == [-0.5, -1.5]
    last = stream.chunk([], [], final=True, top=([], []))
    assert last is None
    assert "top_token_ids" not in TokenStream([], True).chunk([5], [0.0], final=True)  # not asked: absent
