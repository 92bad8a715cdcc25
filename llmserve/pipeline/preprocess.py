"""preprocessing: validate each client request once, then tokenize the whole dynamic batch in one call."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..contract import ECHO_IDS, REQUEST_KEY, UPSTREAM_PREPROCESSING_NAMES, UPSTREAM_PREPROCESSING_OUTPUT_NAMES
from ..errors import RequestError
from ..request.guided import read_guide
from ..request.parameters import refuse_parameters
from ..request.reader import Reader, check, one, stop_words_match, text, words
from ..request.sampling import CLIENT_NAMES, read_sampling
from ..request.token_request import check_guided_min_tokens, read_top_log_probs
from ..request.word_lists import to_word_list
from ..text.tokenizer import load_hf_tokenizer
from .cancellation import edge_key, key_tensor
from .options import PreprocessOptions


def _grammar_of(guide_type: str, guide: str):
    """engine.guided's parser, imported on the first guided request: the module loads xgrammar and with it
    torch (4.3 s and 250 MB per preprocessing instance on the 2-core CPU), which a server start would
    otherwise pay on every restart for requests that rarely carry a guide."""
    from ..engine.guided import grammar_of

    return grammar_of(guide_type, guide)


@dataclass
class ValidRequest:
    prompt: str
    chat: bool
    max_tokens: int
    streaming: bool
    end_id: int
    pad_id: int
    stop_words: list[str]
    bad_words: list[str]
    exclude_input_in_output: bool  # as sent, else the spec's default


class Preprocessor:
    def __init__(self, opts: PreprocessOptions):
        self.opts = opts
        self.tok = load_hf_tokenizer(opts.tokenizer_dir, opts.trust_remote_code)
        # The batch goes to the Rust tokenizer itself (the one `tok(texts)` calls), without the character
        # offsets it computes and transformers drops: the same ids in about two thirds of the time of
        # `tok(texts)` (1.04 against 1.62 ms for 8 prompts of 130 tokens, 2-core CPU, 2026-12-06).
        # The frontend counts its prompts the same way (openai_api/prompts.py).
        self._encoder = self.tok.backend_tokenizer
        self.end_id = self.tok.eos_token_id
        self.pad_id = self.tok.pad_token_id if self.tok.pad_token_id is not None else self.end_id
        if opts.apply_chat_template and not self.tok.chat_template:
            raise ValueError(f"{opts.tokenizer_dir} has no chat template; set tokenizer.apply_chat_template: false")
        # No token stands for more UTF-8 bytes than its vocabulary string has (byte-level and
        # SentencePiece strings only over-count), so a prompt longer than this cannot fit
        # max_input_len tokens: reject it before tokenizing (a 10 MB prompt took 14 s to tokenize
        # and stalled every other request meanwhile).
        longest = max((len(t.encode("utf-8")) for t in self.tok.get_vocab()), default=1)
        self.max_prompt_bytes = opts.max_input_len * max(1, longest)

    def validate(self, read: Reader) -> ValidRequest:
        raw = read("text_input")
        if raw is None:
            raise RequestError("text_input", "is required")
        if raw.size != 1:
            raise RequestError("text_input", f"expects one prompt per request, got shape {list(raw.shape)}")
        prompt = text("text_input", raw.reshape(-1)[0])
        size = len(prompt.encode("utf-8", "surrogatepass"))
        check(
            "text_input",
            size <= self.max_prompt_bytes,
            f"is {size} bytes, longer than any prompt of at most {self.opts.max_input_len} tokens "
            f"({self.max_prompt_bytes} bytes)",
        )
        check("text_input", prompt.strip() != "", "must not be empty")
        max_tokens = one(read, "max_tokens", int, required=True)
        limit = self.opts.max_output_len
        check("max_tokens", 1 <= max_tokens <= limit, f"must be in [1, {limit}], got {max_tokens}")
        sampling = read_sampling(read, CLIENT_NAMES, max_tokens, self.opts.max_beam_width)  # range checks only
        # The guide is parsed here (a bad one: 400 before any engine slot), and reaches tensorrt_llm
        # straight from the client's tensors (the ensemble wires them there).
        check_guided_min_tokens(read_guide(read, _grammar_of), sampling["min_tokens"])
        read_top_log_probs(read)  # checked here for the 400; tensorrt_llm reads it too
        stop_words_match(read)  # checked here for the 400; tensorrt_llm reads it (the ensemble passes it on)
        vocab = len(self.tok)
        end_id, pad_id = one(read, "end_id", int, self.end_id), one(read, "pad_id", int, self.pad_id)
        for name, v in (("end_id", end_id), ("pad_id", pad_id)):
            check(name, 0 <= v < vocab, f"must lie in [0, {vocab}), got {v}")
        return ValidRequest(
            prompt=prompt,
            chat=one(read, "apply_chat_template", bool, self.opts.apply_chat_template),
            max_tokens=max_tokens,
            streaming=one(read, "stream", bool, False),
            end_id=end_id,
            pad_id=pad_id,
            stop_words=words(read, "stop_words"),
            bad_words=words(read, "bad_words"),
            exclude_input_in_output=one(read, "exclude_input_in_output", bool, self.opts.exclude_input_in_output),
        )

    def _render(self, r: ValidRequest) -> str:
        if not r.chat:
            return r.prompt
        if not self.tok.chat_template:
            raise RequestError("apply_chat_template", "this model has no chat template")
        # The template is the checkpoint's own; requests can only switch it on or off.
        return self.tok.apply_chat_template(
            [{"role": "user", "content": r.prompt}], tokenize=False, add_generation_prompt=True
        )

    def _encode(self, texts: list[str], add_special_tokens: bool) -> list[list[int]]:
        return [e.ids for e in self._encoder.encode_batch_fast(texts, add_special_tokens=add_special_tokens)]

    def _word_ids(self, ws: list[str]) -> list[list[int]]:
        # A word that encodes to no tokens (some control characters do) can never match; an empty
        # entry would also give the word list two equal offsets, which tensorrt_llm rejects.
        ids = [self.tok.encode(w, add_special_tokens=False) for w in ws] if ws else []
        return [w for w in ids if w]

    def process(
        self,
        reads: list[Reader],
        parameters: list[str | dict | None] | None = None,
        request_ids: list[str] | None = None,
    ) -> list[dict[str, np.ndarray] | RequestError]:
        """One result per request: output tensors (with a leading batch dim of 1) or the error.
        `parameters`: each request's request parameters (a JSON object), all refused (see
        request/parameters.py: HTTP generate turns unknown JSON keys into them). `request_ids`: the
        Triton request ids (empty when the client set none): each request's key, the id a `stop`
        names to cancel it, is its id or a unique minted one (pipeline/cancellation.py)."""
        results: list = []
        valid: list[tuple[int, ValidRequest, str]] = []
        upstream = [read("QUERY") is not None for read in reads]  # called with upstream's tensor names
        reads = [_upstream_reader(read) if up else read for read, up in zip(reads, upstream)]
        for i, read in enumerate(reads):
            try:
                refuse_parameters(parameters[i] if parameters else None)
                r = self.validate(read)
                valid.append((i, r, self._render(r)))
                results.append(None)
            except RequestError as e:
                results.append(e)
        if not valid:
            return results
        # One tokenizer call for the whole batch. Chat-rendered text already holds its special tokens.
        encoded = {}
        for chat in (True, False):
            group = [(i, s) for i, r, s in valid if r.chat == chat]
            if group:
                add = self.opts.add_special_tokens and not chat
                ids = self._encode([s for _, s in group], add)
                encoded.update({i: x for (i, _), x in zip(group, ids)})
        # The echo of a templated prompt (exclude_input_in_output false) is the prompt as the client sent
        # it, tokenized as it would be without the template (upstream has none); otherwise input_ids.
        echoed = [(i, r.prompt) for i, r, _ in valid if r.chat and not r.exclude_input_in_output]
        echo = {}
        if echoed:
            ids = self._encode([s for _, s in echoed], self.opts.add_special_tokens)
            echo = {i: x for (i, _), x in zip(echoed, ids)}
        for i, r, _ in valid:
            ids = encoded[i]
            if len(ids) > self.opts.max_input_len:
                results[i] = RequestError(
                    "text_input", f"prompt is {len(ids)} tokens, the limit is {self.opts.max_input_len}"
                )
                continue
            results[i] = {
                "input_ids": np.array([ids], dtype=np.int32),
                "input_lengths": np.array([[len(ids)]], dtype=np.int32),
                "request_output_len": np.array([[r.max_tokens]], dtype=np.int32),
                "out_end_id": np.array([[r.end_id]], dtype=np.int32),
                "out_pad_id": np.array([[r.pad_id]], dtype=np.int32),
                "streaming": np.array([[r.streaming]], dtype=np.bool_),
                "stop_words_list": to_word_list(self._word_ids(r.stop_words))[None],
                "bad_words_list": to_word_list(self._word_ids(r.bad_words))[None],
                REQUEST_KEY: key_tensor(edge_key(request_ids[i] if request_ids else "")),
                ECHO_IDS: np.array([echo.get(i, ids)], dtype=np.int32),
            }
            if upstream[i]:
                results[i] = _upstream_outputs(results[i], r.pad_id)
        return results


def _upstream_reader(read: Reader) -> Reader:
    """Reads our input names from a request that uses upstream's (QUERY, REQUEST_OUTPUT_LEN, ...)."""
    theirs = {ours: up for up, ours in UPSTREAM_PREPROCESSING_NAMES.items()}
    return lambda name: read(theirs.get(name, name))


def _upstream_outputs(outputs: dict[str, np.ndarray], pad_id: int) -> dict[str, np.ndarray]:
    """Our outputs under upstream's names, plus what upstream's preprocessing answers for a decoder-only
    model: DECODER_INPUT_ID one pad token, REQUEST_DECODER_INPUT_LEN 1."""
    out = {
        UPSTREAM_PREPROCESSING_OUTPUT_NAMES[k]: v
        for k, v in outputs.items()
        if k in UPSTREAM_PREPROCESSING_OUTPUT_NAMES
    }
    out["DECODER_INPUT_ID"] = np.array([[pad_id]], dtype=np.int32)
    out["REQUEST_DECODER_INPUT_LEN"] = np.array([[1]], dtype=np.int32)
    return out
