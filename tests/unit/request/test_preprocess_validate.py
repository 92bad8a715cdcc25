"""The ensemble's request edge: Preprocessor.validate (pipeline/preprocess.py) checks every client
field once, with errors that name the field, before anything is tokenized; process() then refuses
a prompt over max_input_len tokens and answers each request of a batch on its own."""

import numpy as np
import pytest

from llmserve.errors import RequestError
from llmserve.pipeline.options import PreprocessOptions
from llmserve.pipeline.preprocess import Preprocessor

from .fields import field_error, reader

MAX_IN, MAX_OUT = 32, 64


@pytest.fixture(scope="module")
def pre(smollm2_dir) -> Preprocessor:
    return Preprocessor(
        PreprocessOptions(
            tokenizer_dir=str(smollm2_dir),
            apply_chat_template=True,
            add_special_tokens=False,
            max_input_len=MAX_IN,
            max_output_len=MAX_OUT,
            max_beam_width=1,
            trust_remote_code=False,
            exclude_input_in_output=True,
        )
    )


def error(pre, **fields) -> tuple[str, str]:
    fields.setdefault("text_input", "Hello")
    fields.setdefault("max_tokens", 4)
    with pytest.raises(RequestError) as e:
        pre.validate(reader(**fields))
    return field_error(e), str(e.value)


def test_defaults(pre):
    r = pre.validate(reader(text_input="Hello", max_tokens=4))
    assert (r.prompt, r.max_tokens, r.chat, r.streaming) == ("Hello", 4, True, False)
    assert r.end_id == pre.tok.eos_token_id and r.pad_id == pre.pad_id
    assert r.stop_words == [] and r.bad_words == []


def test_fields_are_read(pre):
    words = np.array([[b"a", b"", b"bc"]], dtype=object)
    r = pre.validate(
        reader(
            text_input="Hi",
            max_tokens=MAX_OUT,
            apply_chat_template=False,
            stream=True,
            end_id=5,
            pad_id=6,
            stop_words=words,
            bad_words=np.array([[b"x"]], dtype=object),
        )
    )
    assert (r.chat, r.streaming, r.max_tokens, r.end_id, r.pad_id) == (False, True, MAX_OUT, 5, 6)
    assert r.stop_words == ["a", "bc"] and r.bad_words == ["x"]


def test_text_input_is_required_and_one_prompt(pre):
    with pytest.raises(RequestError, match="invalid text_input: is required"):
        pre.validate(reader(max_tokens=4))
    field, message = error(pre, text_input=np.array([[b"a", b"b"]], dtype=object))
    assert field == "text_input" and "expects one prompt per request, got shape [1, 2]" in message


@pytest.mark.parametrize("prompt", ["", "   ", "\n\t"])
def test_an_empty_prompt_is_refused(pre, prompt):
    assert error(pre, text_input=prompt) == ("text_input", "invalid text_input: must not be empty")


def test_text_input_must_be_utf8(pre):
    field, message = error(pre, text_input=np.array([[b"\xff\xfe"]], dtype=object))
    assert field == "text_input" and "is not valid UTF-8" in message


def test_a_prompt_too_long_for_any_tokenization_is_refused_before_tokenizing(pre):
    assert pre.max_prompt_bytes >= MAX_IN
    pre.validate(reader(text_input="a" * pre.max_prompt_bytes, max_tokens=4))  # the byte bound is inclusive
    field, message = error(pre, text_input="a" * (pre.max_prompt_bytes + 1))
    assert field == "text_input" and f"{pre.max_prompt_bytes + 1} bytes, longer than any prompt" in message


def test_max_tokens_is_required_and_bounded(pre):
    with pytest.raises(RequestError, match="invalid max_tokens: is required"):
        pre.validate(reader(text_input="Hello"))
    assert pre.validate(reader(text_input="Hello", max_tokens=1)).max_tokens == 1
    for bad in (0, -1, MAX_OUT + 1):
        assert error(pre, max_tokens=bad) == ("max_tokens", f"invalid max_tokens: must be in [1, {MAX_OUT}], got {bad}")


@pytest.mark.parametrize(
    "fields, field",
    [
        ({"top_k": -1}, "top_k"),
        ({"top_p": 1.5}, "top_p"),
        ({"temperature": -1.0}, "temperature"),
        ({"min_tokens": 5}, "min_tokens"),
        ({"beam_width": 2}, "beam_width"),
        ({"repetition_penalty": 0.0}, "repetition_penalty"),
    ],
)
def test_sampling_is_range_checked_under_the_client_names(pre, fields, field):
    assert error(pre, **fields)[0] == field


@pytest.mark.parametrize("name", ["end_id", "pad_id"])
def test_end_and_pad_ids_lie_in_the_vocabulary(pre, name):
    vocab = len(pre.tok)
    assert getattr(pre.validate(reader(text_input="Hi", max_tokens=4, **{name: vocab - 1})), name) == vocab - 1
    for bad in (-1, vocab):
        assert error(pre, **{name: bad}) == (name, f"invalid {name}: must lie in [0, {vocab}), got {bad}")


def test_word_list_errors_name_the_field(pre):
    assert error(pre, stop_words=np.array([[b"x" * 257]], dtype=object))[0] == "stop_words"
    assert error(pre, bad_words=np.array([[b"w"] * 65], dtype=object))[0] == "bad_words"


def test_process_answers_each_request_of_a_batch_on_its_own(pre):
    long = " ".join(["word"] * (2 * MAX_IN))  # within the byte bound, over the token limit
    good, bad_tokens, bad_field = pre.process(
        [
            reader(
                text_input="Hello", max_tokens=4, apply_chat_template=False, stop_words=np.array([[b"."]], dtype=object)
            ),
            reader(text_input=long, max_tokens=4, apply_chat_template=False),
            reader(text_input="Hello", max_tokens=0),
        ]
    )
    assert isinstance(good, dict)
    assert good["input_ids"].shape[0] == 1 and good["input_lengths"].tolist() == [[good["input_ids"].shape[1]]]
    assert good["request_output_len"].tolist() == [[4]] and good["streaming"].tolist() == [[False]]
    assert good["stop_words_list"].shape[:2] == (1, 2) and good["bad_words_list"].tolist() == [[[0], [-1]]]
    assert isinstance(bad_tokens, RequestError) and bad_tokens.field == "text_input"
    assert f"the limit is {MAX_IN}" in str(bad_tokens)
    assert isinstance(bad_field, RequestError) and bad_field.field == "max_tokens"


def test_guided_decoding_is_checked_at_the_edge(pre):
    ok = reader(text_input="Hi", max_tokens=4, guided_decoding_guide_type="regex", guided_decoding_guide="[0-9]+")
    pre.validate(ok)
    assert error(pre, guided_decoding_guide_type="yaml")[0] == "guided_decoding_guide_type"
    assert error(pre, guided_decoding_guide_type="json_schema", guided_decoding_guide="{")[0] == "guided_decoding_guide"
    assert error(pre, guided_decoding_guide_type="json", min_tokens=1)[0] == "min_tokens"


def test_the_echo_is_the_prompt_as_sent(pre):
    """exclude_input_in_output false with the chat template: echo_ids are the client's text tokenized
    without the template (upstream has none), so the echoed prompt is what the client sent; without the
    template, or with the input excluded, they are input_ids."""
    templated, plain, excluded = pre.process(
        [
            reader(text_input="Hello there", max_tokens=4, exclude_input_in_output=False),
            reader(text_input="Hello there", max_tokens=4, exclude_input_in_output=False, apply_chat_template=False),
            reader(text_input="Hello there", max_tokens=4),  # the spec's default: excluded
        ]
    )
    assert pre.tok.decode(templated["echo_ids"][0]) == "Hello there"
    assert templated["echo_ids"].shape[1] < templated["input_ids"].shape[1]
    for out in (plain, excluded):
        assert out["echo_ids"].tolist() == out["input_ids"].tolist()


@pytest.mark.parametrize("add", [False, True])
def test_the_batch_is_tokenized_as_the_tokenizer_itself_does(pre, add):
    # _encode skips transformers' wrapper (and the offsets it drops): the ids must be those of tok(texts).
    texts = [
        "Hello",
        "  leading spaces and\ttabs\n",
        "<|im_start|>user\nhi<|im_end|>",  # special tokens in the text are matched as such
        "naïve café 漢字 🙂",
        "x" * 300,
    ]
    assert pre._encode(texts, add) == pre.tok(texts, add_special_tokens=add)["input_ids"]
