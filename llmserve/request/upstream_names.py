"""What NVIDIA's `inflight_batcher_llm` model repository (TensorRT-LLM `triton_backend/all_models/`)
declares on its client-facing models, as data: each tensor with its upstream type and what it
means here. docs/upstream-compatibility.md lists every one; tests/unit/request/test_upstream_compat.py
holds that page, this table and contract.py to each other, so none of them can drift.

Read in TensorRT-LLM's triton_backend at the commits named in UPSTREAM_SOURCES. The tensorrt_llm
model's own table (what the C++ backend reads) is trtllm/upstream.py."""

from __future__ import annotations

from dataclasses import dataclass

UPSTREAM_SOURCES = {
    "ensemble": "all_models/inflight_batcher_llm/ensemble/config.pbtxt @ 2a9abd9",
    "preprocessing": "all_models/inflight_batcher_llm/preprocessing/config.pbtxt @ 808059d",
    "postprocessing": "all_models/inflight_batcher_llm/postprocessing/config.pbtxt @ 89fd9b7",
}

SAME = "same"  # accepted with upstream's name, type and meaning
DIFFERENT = "different"  # accepted, documented difference (the note says what and why)
REFUSED = "refused"  # an explicit error naming it (gRPC: Triton's "unexpected inference input"; HTTP: 400)


@dataclass(frozen=True)
class Upstream:
    name: str
    dtype: str  # Triton type without TYPE_
    status: str
    note: str = ""


_BEAM = "beam search only, and this server serves beam_width 1"
_PTUNING = "prompt tuning (p-tuning tables) is not served"
_LORA = "LoRA adapters are not served"

ENSEMBLE_INPUTS: list[Upstream] = [
    Upstream(
        "text_input",
        "STRING",
        DIFFERENT,
        "the checkpoint's chat template is applied unless the spec's "
        "tokenizer.apply_chat_template or the request's apply_chat_template is false; one prompt per request "
        "(batch > 1 is refused)",
    ),
    Upstream("decoder_text_input", "STRING", REFUSED, "encoder-decoder models are not served"),
    Upstream("max_tokens", "INT32", SAME),
    Upstream("num_return_sequences", "INT32", REFUSED, "one sequence per request"),
    Upstream("bad_words", "STRING", SAME),
    Upstream(
        "stop_words",
        "STRING",
        SAME,
        "each word tokenized alone, matched as a token sequence, its tokens kept in the output; "
        'stop_words_match "text" matches on the text instead',
    ),
    Upstream(
        "exclude_input_in_output",
        "BOOL",
        DIFFERENT,
        "absent: the spec's serving.exclude_input_in_output, true by default (upstream: false)",
    ),
    Upstream("end_id", "INT32", SAME),
    Upstream("pad_id", "INT32", SAME),
    Upstream("top_k", "INT32", SAME, "TensorRT-LLM's rule: top_k == 0 and top_p == 0 (both absent) is greedy"),
    Upstream("top_p", "FP32", SAME, "0 or absent: no top-p cut (see top_k)"),
    Upstream("temperature", "FP32", SAME, "alone, with neither top_k nor top_p, greedy as in TensorRT-LLM"),
    Upstream("length_penalty", "FP32", REFUSED, _BEAM),
    Upstream("repetition_penalty", "FP32", SAME),
    Upstream("min_tokens", "INT32", SAME),
    Upstream("presence_penalty", "FP32", SAME),
    Upstream("frequency_penalty", "FP32", SAME),
    Upstream("seed", "UINT64", SAME),
    Upstream("return_log_probs", "BOOL", SAME),
    Upstream("return_context_logits", "BOOL", REFUSED, "logits are not returned"),
    Upstream("return_generation_logits", "BOOL", REFUSED, "logits are not returned"),
    Upstream("return_perf_metrics", "BOOL", REFUSED, "per-request KV-cache and timing metrics are not returned"),
    Upstream("beam_width", "INT32", SAME, "values above the spec's max_beam_width (1) are refused"),
    Upstream("stream", "BOOL", SAME),
    Upstream("prompt_embedding_table", "FP16", REFUSED, _PTUNING),
    Upstream("prompt_table_extra_id", "UINT64", REFUSED, _PTUNING),
    Upstream("prompt_vocab_size", "INT32", REFUSED, _PTUNING),
    Upstream("embedding_bias_words", "STRING", REFUSED, "embedding bias is not served"),
    Upstream("embedding_bias_weights", "FP32", REFUSED, "embedding bias is not served"),
    Upstream("lora_task_id", "UINT64", REFUSED, _LORA),
    Upstream("lora_weights", "FP16", REFUSED, _LORA),
    Upstream("lora_config", "INT32", REFUSED, _LORA),
    Upstream(
        "guided_decoding_guide_type",
        "STRING",
        SAME,
        "json, json_schema, regex, ebnf_grammar, structural_tag (xgrammar, both engines); empty: not guided",
    ),
    Upstream(
        "guided_decoding_guide",
        "STRING",
        SAME,
        "a bad schema, regex or grammar is a 400 naming it (parsed in preprocessing); none for json",
    ),
]

# Names from older upstream versions that its docs and configs still show; sent today they are
# refused with the current name (gRPC: Triton's "unexpected inference input"; HTTP generate: 400).
RENAMED: dict[str, str] = {
    "random_seed": "seed",
    "min_length": "min_tokens",
    # tensorrt_llm's names, sent to the ensemble by mistake
    "streaming": "stream",
    "runtime_top_k": "top_k",
    "runtime_top_p": "top_p",
    "len_penalty": "length_penalty",
    "request_output_len": "max_tokens",
}

ENSEMBLE_OUTPUTS: list[Upstream] = [
    Upstream("text_output", "STRING", SAME, "one string per request: shape [1] (upstream's [-1] per beam)"),
    Upstream("cum_log_probs", "FP32", SAME),
    Upstream("output_log_probs", "FP32", SAME),
    Upstream("context_logits", "FP32", REFUSED, "logits are not returned"),
    Upstream("generation_logits", "FP32", REFUSED, "logits are not returned"),
    Upstream("batch_index", "INT32", REFUSED, "one prompt per request"),
    Upstream("sequence_index", "INT32", REFUSED, "one sequence per request"),
    *[
        Upstream(n, dt, REFUSED, "per-request perf metrics are not returned")
        for n, dt in [
            ("kv_cache_alloc_new_blocks", "INT32"),
            ("kv_cache_reused_blocks", "INT32"),
            ("kv_cache_alloc_total_blocks", "INT32"),
            ("arrival_time_ns", "INT64"),
            ("first_scheduled_time_ns", "INT64"),
            ("first_token_time_ns", "INT64"),
            ("last_token_time_ns", "INT64"),
            ("acceptance_rate", "FP32"),
            ("total_accepted_draft_tokens", "INT32"),
            ("total_draft_tokens", "INT32"),
        ]
    ],
]


_MM = "multimodal models are not served"
PREPROCESSING_INPUTS: list[Upstream] = [
    Upstream("QUERY", "STRING", DIFFERENT, "read as text_input: the chat template applies as there (upstream: none)"),
    Upstream("DECODER_QUERY", "STRING", REFUSED, "encoder-decoder models are not served"),
    Upstream("IMAGE_BYTES", "UINT8", REFUSED, _MM),
    Upstream("IMAGE_URL", "STRING", REFUSED, _MM),
    Upstream("VIDEO_BYTES", "UINT8", REFUSED, _MM),
    Upstream("REQUEST_OUTPUT_LEN", "INT32", SAME, "read as max_tokens"),
    Upstream("BAD_WORDS_DICT", "STRING", SAME),
    Upstream("STOP_WORDS_DICT", "STRING", SAME),
    Upstream("EMBEDDING_BIAS_WORDS", "STRING", REFUSED, "embedding bias is not served"),
    Upstream("EMBEDDING_BIAS_WEIGHTS", "FP32", REFUSED, "embedding bias is not served"),
    Upstream("END_ID", "INT32", SAME),
    Upstream("PAD_ID", "INT32", SAME),
    Upstream("PROMPT_TABLE_EXTRA_ID", "UINT64", REFUSED, _PTUNING),
]
PREPROCESSING_OUTPUTS: list[Upstream] = [
    Upstream("INPUT_ID", "INT32", SAME),
    Upstream("REQUEST_INPUT_LEN", "INT32", SAME),
    Upstream("DECODER_INPUT_ID", "INT32", SAME, "one pad token (decoder-only models)"),
    Upstream("REQUEST_DECODER_INPUT_LEN", "INT32", SAME, "1"),
    Upstream("BAD_WORDS_IDS", "INT32", SAME),
    Upstream("STOP_WORDS_IDS", "INT32", SAME),
    Upstream("EMBEDDING_BIAS", "FP32", REFUSED, "embedding bias is not served"),
    Upstream("REQUEST_OUTPUT_LEN", "INT32", SAME),
    Upstream("OUT_END_ID", "INT32", SAME),
    Upstream("OUT_PAD_ID", "INT32", SAME),
    Upstream("OUT_PROMPT_TABLE_EXTRA_IDS", "UINT64", REFUSED, _PTUNING),
    *[
        Upstream(n, dt, REFUSED, _MM)
        for n, dt in [
            ("PIXEL_VALUES", "FP16"),
            ("ASPECT_RATIO_IDS", "INT64"),
            ("ASPECT_RATIO_MASK", "INT64"),
            ("CROSS_ATTENTION_MASK", "INT64"),
            ("IMAGE_SIZES", "INT64"),
            ("IS_VIDEO_INPUT", "BOOL"),
            ("ATTENTION_MASK", "INT64"),
            ("IMAGE_GRID_THW", "INT64"),
            ("VISION_INPUT_ID", "INT32"),
        ]
    ],
]
POSTPROCESSING_INPUTS: list[Upstream] = [
    Upstream("TOKENS_BATCH", "INT32", SAME),
    Upstream("SEQUENCE_LENGTH", "INT32", SAME),
]
POSTPROCESSING_OUTPUTS: list[Upstream] = [Upstream("OUTPUT", "STRING", SAME, "one string per beam")]


def refusal(name: str) -> str | None:
    """Why an upstream ensemble input `name` is refused here (None: not an upstream name we refuse)."""
    if name in RENAMED:
        return f"an older upstream name: send {RENAMED[name]!r}"
    for u in ENSEMBLE_INPUTS:
        if u.name == name and u.status == REFUSED:
            return f"not supported here ({u.note})"
    return None
