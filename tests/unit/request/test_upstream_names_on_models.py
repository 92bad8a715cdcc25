"""Upstream's tensor names on preprocessing and postprocessing (NVIDIA's end_to_end_test.py calls those
models itself): QUERY / REQUEST_OUTPUT_LEN / BAD_WORDS_DICT / STOP_WORDS_DICT in, INPUT_ID /
REQUEST_INPUT_LEN / ... out; TOKENS_BATCH / SEQUENCE_LENGTH in, OUTPUT out. Our own names answer as
before, and tensorrt_llm takes upstream's one-pad-token decoder_input_ids back."""

import numpy as np
import pytest

from llmserve import contract as C
from llmserve.errors import RequestError
from llmserve.pipeline.options import PreprocessOptions
from llmserve.pipeline.postprocess import postprocess_batch
from llmserve.pipeline.preprocess import Preprocessor
from llmserve.request.token_request import parse_engine_request
from llmserve.text.detokenize import Detokenizer
from llmserve.text.tokenizer import load_fast


@pytest.fixture(scope="module")
def pre(smollm2_dir) -> Preprocessor:
    return Preprocessor(
        PreprocessOptions(
            tokenizer_dir=str(smollm2_dir),
            apply_chat_template=False,
            add_special_tokens=False,
            max_input_len=32,
            max_output_len=64,
            max_beam_width=1,
            trust_remote_code=False,
            exclude_input_in_output=True,
        )
    )


def test_preprocessing_answers_upstreams_names_to_upstreams_names(pre):
    upstream = {
        "QUERY": np.array([["Hello there"]], dtype=object),
        "REQUEST_OUTPUT_LEN": np.array([[7]], np.int32),
        "BAD_WORDS_DICT": np.array([[""]], dtype=object),
        "STOP_WORDS_DICT": np.array([["x"]], dtype=object),
    }
    ours = {
        "text_input": upstream["QUERY"],
        "max_tokens": upstream["REQUEST_OUTPUT_LEN"],
        "stop_words": upstream["STOP_WORDS_DICT"],
    }
    (theirs,), (mine,) = pre.process([upstream.get]), pre.process([ours.get])
    assert set(theirs) == {t.name for t in C.PREPROCESSING_UPSTREAM_OUTPUTS}
    for name, up in C.UPSTREAM_PREPROCESSING_OUTPUT_NAMES.items():
        assert np.array_equal(theirs[up], mine[name]), name
    assert theirs["DECODER_INPUT_ID"].tolist() == [[pre.pad_id]] and theirs["REQUEST_DECODER_INPUT_LEN"].tolist() == [
        [1]
    ]
    assert set(mine) == {t.name for t in C.PREPROCESSING_OUTPUTS}


def test_postprocessing_answers_tokens_batch_as_output(smollm2_dir):
    detok = Detokenizer(load_fast(smollm2_dir))
    ids, lengths = np.array([[[19556, 314, 260, 0]]], np.int32), np.array([[3]], np.int32)
    theirs = postprocess_batch(detok, [{"TOKENS_BATCH": ids, "SEQUENCE_LENGTH": lengths}.get])[0]
    mine = postprocess_batch(detok, [{"output_ids": ids, "sequence_length": lengths}.get])[0]
    assert set(theirs) == {"OUTPUT"} and theirs["OUTPUT"].shape == (1,)
    assert theirs["OUTPUT"].tolist() == mine["text_output"].tolist()
    missing = postprocess_batch(detok, [{}.get])[0]
    assert isinstance(missing, RequestError) and "TOKENS_BATCH" in str(missing)


def _engine_request(**extra):
    values = {"input_ids": np.array([[1, 2, 3]], np.int32), "request_output_len": np.array([[4]], np.int32), **extra}
    return parse_engine_request(
        values.get,
        vocab_size=100,
        default_end_ids=(2,),
        max_input_len=32,
        max_output_len=64,
        exclude_default=True,
        decode_word=lambda ids: "",
    )


def test_tensorrt_llm_takes_upstreams_one_pad_token_decoder_input_back():
    assert _engine_request(decoder_input_ids=np.array([[0]], np.int32)).prompt == [1, 2, 3]
    with pytest.raises(RequestError, match="^invalid decoder_input_ids: encoder-decoder models are not served"):
        _engine_request(decoder_input_ids=np.array([[5, 6]], np.int32))
