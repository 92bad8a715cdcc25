"""OpenAI's `stop` is a string the answer must not contain, matched on the text: the frontend says so
explicitly to the ensemble, whose default is TensorRT-LLM's token sequences (contract.STOP_WORDS_MATCH)."""

from llmserve.contract import STOP_MATCH_TEXT, STOP_WORDS_MATCH
from llmserve.openai_api.prompts import Prompt
from llmserve.openai_api.protocol import CompletionRequest, parse
from llmserve.openai_api.service import Service


def test_stop_strings_select_text_matching():
    req = parse(CompletionRequest, {"model": "m", "prompt": "hi", "stop": ["\n\n"]})
    body = Service.ensemble_body(req, Prompt(text="hi", tokens=1, max_tokens=8, stop=["\n\n"]))
    assert body["stop_words"] == ["\n\n"] and body[STOP_WORDS_MATCH] == STOP_MATCH_TEXT
    without = Service.ensemble_body(req, Prompt(text="hi", tokens=1, max_tokens=8))
    assert "stop_words" not in without and STOP_WORDS_MATCH not in without
