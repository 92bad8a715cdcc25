"""What the TensorRT-LLM Triton backend of the pinned image reads, as data (not prose).

The C++ backend (`backend: "tensorrtllm"`) of nvcr.io/nvidia/tritonserver:25.12-trtllm-python-py3 is
TensorRT-LLM 1.1.0's `triton_backend/inflight_batcher_llm` (tensorrtllm_backend v1.1.0, commit b9cc224,
pins the tensorrt_llm submodule at 48b7b5d8). Every entry below was read in those sources (files named
in `read_in`, relative to triton_backend/inflight_batcher_llm/src/ of NVIDIA/TensorRT-LLM). The
generator checks every tensorrtllm config against this table (trtllm/config.py -> check_config), the
stand-in backend reads its parameters through it, and tests/unit/trtllm/test_upstream.py holds both to
it. When the pinned image changes, this file is what must be re-read against the new sources.

How the backend reads a parameter (model_state.cc, ModelState::GetParameter<T>): it takes the
`string_value` and converts it (std::stoi / stoul / stoull / stof; bool accepts True/true/TRUE/1 and
False/false/FALSE/0). Most reads are wrapped in try/catch: a missing key *or a value that does not
convert* logs a warning and the default is used, so a typo is silent. A few are read without a
try/catch (`required`): a missing key throws "Cannot find parameter with name: <key>", instance
creation fails ("unexpected error when creating modelInstanceState") and tritonserver exits."""

from __future__ import annotations

from dataclasses import dataclass

PINNED_IMAGE = "nvcr.io/nvidia/tritonserver:25.12-trtllm-python-py3"
TENSORRT_LLM_VERSION = "1.1.0"
BACKEND_RELEASE = "tensorrtllm_backend v1.1.0 (b9cc224), TensorRT-LLM submodule 48b7b5d8"

MIS = "model_instance_state.cc"
MS = "model_state.cc"
UTILS = "utils.cc"

BOOL_TRUE = ("True", "true", "TRUE", "1")
BOOL_FALSE = ("False", "false", "FALSE", "0")


@dataclass(frozen=True)
class Param:
    name: str
    type: str
    """How the string_value is converted: str, int (stoi), uint (stoul), uint64 (stoull / size_t),
    float (stof), bool, int_csv ("1,2,3"), int_csv_sets ("{1,2},{3}"), gpu_sets ("0,1;2,3")."""
    required: bool
    """Read without a default: a config without it does not load."""
    default: str | None
    """What the backend uses when the key is absent (None: unset, the executor decides)."""
    read_in: str
    accepted: tuple[str, ...] = ()
    """Enumerated values (empty: any value of `type`)."""
    note: str = ""


def _p(name, type_, default, read_in, accepted=(), note="", required=False) -> Param:
    return Param(name, type_, required, default, read_in, tuple(accepted), note)


PARAMETERS: dict[str, Param] = {
    p.name: p
    for p in [
        # --- read without a default: the instance fails to load without them -------------------------
        _p(
            "gpt_model_type",
            "str",
            None,
            f"{MIS} getBatchingTypeFromParams",
            ("V1", "v1", "inflight_batching", "inflight_fused_batching"),
            "Any other value throws 'Invalid gpt_model_type'.",
            required=True,
        ),
        _p(
            "tokenizer_dir",
            "str",
            None,
            f"{MIS} getGuidedDecodingConfigFromParams",
            note='Read with no try/catch; the C++ backend only logs that it ignores it. Emit "".',
            required=True,
        ),
        _p(
            "xgrammar_tokenizer_info_path",
            "str",
            None,
            f"{MIS} getGuidedDecodingConfigFromParams",
            note='Read with no try/catch. "" disables guided decoding; a non-empty path must exist.',
            required=True,
        ),
        _p(
            "guided_decoding_backend",
            "str",
            None,
            f"{MIS} getGuidedDecodingConfigFromParams",
            ("", "xgrammar"),
            'Read with no try/catch. "" disables guided decoding; with an info path, anything but xgrammar throws.',
            required=True,
        ),
        _p(
            "gpt_model_path",
            "str",
            None,
            f"{MIS} ModelInstanceState()",
            note="Caught when missing, but a decoder-only model then fails with 'Both encoder and decoder model paths "
            "are empty'. std::filesystem::exists() resolves a relative path against the process cwd: emit an "
            "absolute path. A path that does not exist is reported as 'gpt_model_path is not specified'.",
            required=True,
        ),
        # --- executor config -----------------------------------------------------------------------------
        _p("encoder_model_path", "str", None, f"{MIS} ModelInstanceState()", note="Encoder-decoder models only."),
        _p("max_beam_width", "int", "1", f"{MIS} getExecutorConfigFromParams"),
        _p(
            "iter_stats_max_iterations",
            "int",
            "1000",
            f"{MIS} getExecutorConfigFromParams",
            note="ExecutorConfig::kDefaultIterStatsMaxIterations.",
        ),
        _p("request_stats_max_iterations", "int", "0", f"{MIS} getExecutorConfigFromParams"),
        _p(
            "enable_trt_overlap",
            "bool",
            None,
            f"{MIS} getExecutorConfigFromParams",
            note="Deprecated: read only to warn 'enable_trt_overlap is deprecated and will be ignored'.",
        ),
        _p("normalize_log_probs", "bool", "true", f"{MIS} getExecutorConfigFromParams"),
        _p(
            "enable_chunked_context",
            "bool",
            "false",
            f"{MIS} getExecutorConfigFromParams",
            note="Needs an engine built with use_paged_context_fmha.",
        ),
        _p(
            "decoding_mode",
            "str",
            None,
            f"{MIS} getExecutorConfigFromParams",
            ("top_k", "top_p", "top_k_top_p", "beam_search", "medusa", "redrafter", "lookahead", "eagle"),
            "Absent or invalid: top_k_top_p for beam width 1, beam_search otherwise (invalid only warns).",
        ),
        _p("medusa_choices", "int_csv_sets", None, f"{MIS} getExecutorConfigFromParams"),
        _p("eagle_choices", "int_csv_sets", None, f"{MIS} getExecutorConfigFromParams"),
        _p(
            "lookahead_window_size",
            "uint",
            None,
            f"{MIS} getExecutorConfigFromParams",
            note="Required (with lookahead_ngram_size, lookahead_verification_set_size) when decoding_mode is lookahead.",
        ),
        _p("lookahead_ngram_size", "uint", None, f"{MIS} getExecutorConfigFromParams"),
        _p("lookahead_verification_set_size", "uint", None, f"{MIS} getExecutorConfigFromParams"),
        _p("gpu_weights_percent", "float", "1.0", f"{MIS} getExecutorConfigFromParams"),
        _p(
            "recv_poll_period_ms",
            "int",
            "0",
            f"{MIS} getExecutorConfigFromParams",
            note="Orchestrator mode: 0 is a busy loop in the receive thread (one CPU core per instance).",
        ),
        _p(
            "exclude_input_in_output",
            "bool",
            "false",
            f"{MIS} ModelInstanceState()",
            note="Default of the per-request input of the same name. Streaming never includes the input.",
        ),
        _p(
            "cancellation_check_period_ms",
            "int",
            "100",
            f"{MIS} ModelInstanceState()",
            note="How often WaitForCancel polls TRITONBACKEND_ResponseFactoryIsCancelled.",
        ),
        _p("stats_check_period_ms", "int", "100", f"{MIS} ModelInstanceState()"),
        # --- KV cache (getKvCacheConfigFromParams) ---------------------------------------------------------
        _p(
            "max_tokens_in_paged_kv_cache",
            "int",
            None,
            f"{MIS} getKvCacheConfigFromParams",
            note="With kv_cache_free_gpu_mem_fraction, the smaller of the two wins.",
        ),
        _p(
            "kv_cache_free_gpu_mem_fraction",
            "float",
            "0.9",
            f"{MIS} getKvCacheConfigFromParams",
            note="Of the memory free when this instance loads.",
        ),
        _p("cross_kv_cache_fraction", "float", None, f"{MIS} getKvCacheConfigFromParams", note="Encoder-decoder only."),
        _p(
            "kv_cache_host_memory_bytes",
            "uint64",
            "0",
            f"{MIS} getKvCacheConfigFromParams",
            note="Host memory for offloaded KV blocks (useful with enable_kv_cache_reuse).",
        ),
        _p("kv_cache_onboard_blocks", "bool", "true", f"{MIS} getKvCacheConfigFromParams"),
        _p(
            "max_attention_window_size",
            "int_csv",
            None,
            f"{MIS} getKvCacheConfigFromParams",
            note="Default max_sequence_length. One value, or one per layer (comma-separated).",
        ),
        _p("sink_token_length", "int", None, f"{MIS} getKvCacheConfigFromParams"),
        _p(
            "enable_kv_cache_reuse",
            "bool",
            "true",
            f"{MIS} getKvCacheConfigFromParams",
            note="Needs an engine built with use_paged_context_fmha.",
        ),
        # --- runtime perf knobs (getExtendedRuntimePerfKnobConfigFromParams) ------------------------------
        _p("multi_block_mode", "bool", "true", f"{MIS} getExtendedRuntimePerfKnobConfigFromParams"),
        _p("enable_context_fmha_fp32_acc", "bool", "false", f"{MIS} getExtendedRuntimePerfKnobConfigFromParams"),
        _p("cuda_graph_mode", "bool", "false", f"{MIS} getExtendedRuntimePerfKnobConfigFromParams"),
        _p("cuda_graph_cache_size", "int", "0", f"{MIS} getExtendedRuntimePerfKnobConfigFromParams"),
        # --- parallelism and placement --------------------------------------------------------------------
        _p(
            "gpu_device_ids",
            "gpu_sets",
            None,
            f"{MS} LoadParameters",
            note="';'-separated sets of comma-separated GPU ids; instance i uses set i % n.",
        ),
        _p(
            "participant_ids",
            "gpu_sets",
            None,
            f"{MS} LoadParameters",
            note="Only with TRTLLM_ORCHESTRATOR_SPAWN_PROCESSES=0.",
        ),
        _p("num_nodes", "int", "1", f"{MIS} getParallelConfigFromParams"),
        _p(
            "executor_worker_path",
            "str",
            "/opt/tritonserver/backends/tensorrtllm/trtllmExecutorWorker",
            f"{MS} GetExecutorWorkerPath",
            note="Orchestrator mode: the worker executable spawned per rank.",
        ),
        _p(
            "worker_path",
            "str",
            None,
            f"{MS} GetExecutorWorkerPath",
            note="Must be absent: the backend throws 'worker_path parameter is specified, but this is no longer "
            "supported'.",
        ),
        # --- scheduler, LoRA, speculative decoding --------------------------------------------------------
        _p(
            "batch_scheduler_policy",
            "str",
            "guaranteed_no_evict",
            f"{MIS} getSchedulerConfigFromParams",
            ("max_utilization", "guaranteed_no_evict"),
            "An invalid value only warns; the default is used.",
        ),
        _p("lora_cache_max_adapter_size", "int", "64", f"{MIS} getPeftCacheConfigFromParams"),
        _p("lora_cache_optimal_adapter_size", "int", "8", f"{MIS} getPeftCacheConfigFromParams"),
        _p("lora_cache_gpu_memory_fraction", "float", "0.05", f"{MIS} getPeftCacheConfigFromParams"),
        _p("lora_cache_host_memory_bytes", "uint64", "1073741824", f"{MIS} getPeftCacheConfigFromParams"),
        _p("lora_prefetch_dir", "str", None, f"{MIS} getPeftCacheConfigFromParams"),
        _p("speculative_decoding_fast_logits", "bool", "false", f"{MIS} getSpeculativeDecodingConfigFromParams"),
        # --- in upstream's template, not read by the C++ backend ------------------------------------------
        _p(
            "FORCE_CPU_ONLY_INPUT_TENSORS",
            "str",
            None,
            "(template only)",
            ("yes", "no"),
            "A Python-backend parameter kept from upstream's template; the C++ backend never reads it.",
        ),
    ]
}

OURS = ("llmserve_",)
"""Prefix of llmserve's own parameters: unknown keys are ignored by the backend, read by our launcher
(llmserve_orchestrator_mode) or by the CI stand-in (STANDIN_PREFIX)."""
STANDIN_PREFIX = "llmserve_standin_"
"""Parameters the CI stand-in adds for the torch engine underneath (docs/tensorrtllm.md)."""

# Other parts of the model config the backend reads (model_state.cc LoadParameters, model_instance_state.cc).
MODEL_CONFIG_READS = {
    "model_transaction_policy.decoupled": "Streaming requires it: 'Streaming is only supported if model is deployed "
    "using decoupled mode.'; batch size > 1 per request too.",
    "dynamic_batching.default_queue_policy.max_queue_size": "Passed to ExecutorConfig as maxQueueSize.",
    "output[generation_logits|context_logits].data_type": "The logits datatype.",
    "instance_group": "Only the count matters; KIND_GPU / gpus are ignored (placement is gpu_device_ids).",
}
ENVIRONMENT = {
    "TRTLLM_ORCHESTRATOR": "1: orchestrator mode (MPI_Comm_spawn of executor workers). Upstream's launcher "
    "always runs tritonserver under `mpirun --allow-run-as-root -n 1` then.",
    "TRTLLM_ORCHESTRATOR_SPAWN_PROCESSES": "Default 1; 0 needs participant_ids.",
}


@dataclass(frozen=True)
class IO:
    name: str
    dtype: str  # Triton type without TYPE_
    dims: tuple[int, ...]
    note: str = ""


# Inputs by name as utils.h InputFieldsNames spells them in 1.1.0 (min_length -> min_tokens and
# random_seed -> seed were renamed in May 2025) and as upstream's tensorrt_llm/config.pbtxt declares
# them. All are optional in the template except input_lengths and request_output_len; variable-length
# ones carry allow_ragged_batch. A request with an input the config does not declare is refused by
# Triton core; a declared input the backend does not know is ignored.
INPUTS: dict[str, IO] = {
    t.name: t
    for t in [
        IO(
            "input_ids",
            "INT32",
            (-1,),
            "Prompt token ids. Missing: 'input_ids or encoder_input_features is not present in the request.'",
        ),
        IO("input_lengths", "INT32", (1,), "Used only to split a batched request (batch > 1)."),
        IO("request_output_len", "INT32", (1,), "Max new tokens; prompt + it above max_seq_len is clamped (warning)."),
        IO(
            "decoder_input_ids",
            "INT32",
            (-1,),
            "Encoder-decoder models: the decoder's prompt (utils.h decoderInputTokens).",
        ),
        IO("end_id", "INT32", (1,), "Executor check: 'EndId (%d) is not within acceptable range [-1, vocab).'"),
        IO("pad_id", "INT32", (1,)),
        IO("stop_words_list", "INT32", (2, -1), "Token-level: each word's ids matched as a sequence."),
        IO("bad_words_list", "INT32", (2, -1), "Token-level."),
        IO("embedding_bias", "FP32", (-1,)),
        IO("beam_width", "INT32", (1,), "Check: 0 < beam_width <= kMaxBeamWidth and <= max_beam_width."),
        IO("temperature", "FP32", (1,), "Check: >= 0."),
        IO("runtime_top_k", "INT32", (1,), "Check: >= 0."),
        IO("runtime_top_p", "FP32", (1,), "<= 0 means unset; else check (0, 1]."),
        IO(
            "runtime_top_p_min",
            "FP32",
            (1,),
            "Declared in the template; the backend reads 'runtime_top_k_min' "
            "(an upstream typo), so this one is ignored.",
        ),
        IO("runtime_top_p_decay", "FP32", (1,)),
        IO("runtime_top_p_reset_ids", "INT32", (1,)),
        IO("len_penalty", "FP32", (1,)),
        IO("early_stopping", "BOOL", (1,)),
        IO("repetition_penalty", "FP32", (1,), "Check: > 0."),
        IO("min_tokens", "INT32", (1,), "Check: >= 0."),
        IO("beam_search_diversity_rate", "FP32", (1,)),
        IO("presence_penalty", "FP32", (1,)),
        IO("frequency_penalty", "FP32", (1,)),
        IO("seed", "UINT64", (1,)),
        IO("no_repeat_ngram_size", "INT32", (1,)),
        IO("num_return_sequences", "INT32", (1,)),
        IO("return_log_probs", "BOOL", (1,), "Only then are cum_log_probs / output_log_probs sent."),
        IO("return_context_logits", "BOOL", (1,)),
        IO("return_generation_logits", "BOOL", (1,)),
        IO("return_perf_metrics", "BOOL", (1,)),
        IO("exclude_input_in_output", "BOOL", (1,), "Overrides the parameter of the same name."),
        IO(
            "stop",
            "BOOL",
            (1,),
            "true: cancel every request with this Triton request id, answer an empty final "
            "response; no id: 'Trying to stop a request but request ID is not provided'.",
        ),
        IO("streaming", "BOOL", (1,), "One response per new token (only new tokens, never the prompt)."),
        IO("prompt_embedding_table", "FP16", (-1, -1)),
        IO("prompt_table_extra_ids", "UINT64", (-1,)),
        IO("prompt_vocab_size", "INT32", (1,)),
        IO("lora_task_id", "UINT64", (1,)),
        IO("lora_weights", "FP16", (-1, -1)),
        IO("lora_config", "INT32", (-1, 3)),
        IO("guided_decoding_guide_type", "STRING", (1,)),
        IO("guided_decoding_guide", "STRING", (1,)),
    ]
}
STREAMING_INPUTS_NOT_TENSORS = ("stop", "streaming")  # read apart, before the request is built

# Outputs (model_instance_state.cc fillTritonResponse). Shapes carry a leading batch dimension of 1.
OUTPUTS: dict[str, IO] = {
    t.name: t
    for t in [
        IO(
            "output_ids",
            "INT32",
            (-1, -1),
            "Always; must be requested ('output_ids tensor must be present in list "
            "of output tensors'). [1, beams, n]: streaming n = new tokens of this "
            "response; non-streaming the whole output (prompt first unless excluded).",
        ),
        IO(
            "sequence_length",
            "INT32",
            (-1,),
            "Always; must be requested. [1, beams]: tokens in this response's output_ids (not a running total).",
        ),
        IO("cum_log_probs", "FP32", (-1,), "Only when the request sets return_log_probs."),
        IO("output_log_probs", "FP32", (-1, -1), "Only when the request sets return_log_probs."),
        IO("context_logits", "FP32", (-1, -1), "Only with return_context_logits."),
        IO(
            "generation_logits",
            "FP32",
            (-1, -1, -1),
            "Only with return_generation_logits, on an engine built with --gather_generation_logits (else the "
            "request fails: GATHER_GENERATION_LOGITS_ERROR). Each response's new tokens' logits, vocab padded to a "
            "multiple of tp_size: streaming [1, new tokens, beams, vocab] (beams before vocab, one new token per "
            "response), non-streaming [1, beams, request_output_len, vocab] (rows past the generated tokens are "
            "never written). dtype: the config's output data_type, which must equal the engine's logits dtype.",
        ),
        IO("batch_index", "INT32", (1,), "Only for a request of batch size > 1."),
        IO("sequence_index", "INT32", (1,), "Only with num_return_sequences > 1."),
    ]
}
ALWAYS_SENT = ("output_ids", "sequence_length")
# The executor's check when it schedules a request with return_generation_logits on an engine built without
# --gather_generation_logits (trtGptModelInflightBatching.cpp, TLLM_CHECK_WITH_INFO): the request fails with
# it, as "Executor failed process requestId <id> due to the following error: <this>".
GATHER_GENERATION_LOGITS_ERROR = (
    "[TensorRT-LLM][ERROR] Assertion failed: To return generation logits, gather_generation_logits must be "
    "enabled in ExecutorConfig"
)
NEVER_SENT = ("output_context_ids",)  # llmserve's torch engine extension; the C++ backend has no such output


# --- checks ---------------------------------------------------------------------------------------------


def _converts(p: Param, value: str) -> bool:
    try:
        if p.type == "bool":
            return value in BOOL_TRUE + BOOL_FALSE
        if p.type in ("int", "uint", "uint64"):
            n = int(value)
            return n >= 0 if p.type != "int" else True
        if p.type == "float":
            float(value)
            return True
        if p.type == "int_csv":
            return all(int(x) >= 0 for x in value.split(","))
        if p.type == "gpu_sets":
            return all(int(x) >= 0 for s in value.split(";") for x in s.split(","))
        if p.type == "int_csv_sets":
            return value.startswith("{") and all(
                int(x) >= 0 for s in value.strip("{}").split("},{") for x in s.split(",")
            )
    except ValueError:
        return False
    return True  # str


def check_parameters(params: dict[str, str]) -> list[str]:
    """Problems with a tensorrt_llm parameters map (key -> string_value), against the table: missing
    required keys, unknown keys, values the backend would not convert (silently defaulted there), values
    outside the accepted set, keys that must be absent, and the cross-key rules the backend enforces."""
    problems = [
        f"{name}: required (read without a default in {p.read_in}); the model would not load"
        for name, p in PARAMETERS.items()
        if p.required and name not in params
    ]
    for key, value in params.items():
        p = PARAMETERS.get(key)
        if p is None:
            if not key.startswith(OURS):
                problems.append(f"{key}: not a parameter of the TensorRT-LLM {TENSORRT_LLM_VERSION} backend")
            continue
        if key == "worker_path":
            problems.append("worker_path: must be absent (the backend refuses it; use executor_worker_path)")
        elif not _converts(p, value):
            problems.append(
                f"{key}: {value!r} is not a valid {p.type}; the backend would ignore it and use "
                f"{p.default if p.default is not None else 'its default'}"
            )
        elif p.accepted and value not in p.accepted:
            problems.append(f"{key}: {value!r} is not one of {', '.join(repr(a) for a in p.accepted)}")
    if params.get("decoding_mode") == "lookahead":
        problems += [
            f"{k}: required when decoding_mode is lookahead"
            for k in ("lookahead_window_size", "lookahead_ngram_size", "lookahead_verification_set_size")
            if k not in params
        ]
    if params.get("guided_decoding_backend") and not params.get("xgrammar_tokenizer_info_path"):
        problems.append(
            "guided_decoding_backend is set but xgrammar_tokenizer_info_path is empty: guided decoding stays off"
        )
    return problems


def check_io(
    inputs: dict[str, tuple[str, tuple[int, ...]]], outputs: dict[str, tuple[str, tuple[int, ...]]]
) -> list[str]:
    """Problems with declared inputs / outputs (name -> (dtype, dims)) against what the backend reads and writes."""
    problems = []
    for kind, declared, table in (("input", inputs, INPUTS), ("output", outputs, OUTPUTS)):
        for name, (dtype, dims) in declared.items():
            want = table.get(name)
            if want is None:
                problems.append(f"{kind} {name}: the backend never {'reads' if kind == 'input' else 'produces'} it")
            elif (dtype, tuple(dims)) != (want.dtype, want.dims):
                problems.append(
                    f"{kind} {name}: declared {dtype} {list(dims)}, the backend uses {want.dtype} {list(want.dims)}"
                )
    problems += [
        f"output {n}: must be declared (the backend throws when it is not requested)"
        for n in ALWAYS_SENT
        if n not in outputs
    ]
    problems += [
        f"input {n}: must be declared" for n in ("input_ids", "input_lengths", "request_output_len") if n not in inputs
    ]
    return problems


def parse_bool(value: str) -> bool:
    """The backend's bool conversion (ValueError where it would throw)."""
    if value in BOOL_TRUE:
        return True
    if value in BOOL_FALSE:
        return False
    raise ValueError(f"Cannot convert {value} to a boolean.")


# --- trtllm-build flags (scripts/build_engine.py) ---------------------------------------------------------
# tensorrt_llm/commands/build.py parse_arguments, and for the plugin flags PluginConfig
# (tensorrt_llm/plugin/plugin.py, added by add_plugin_argument). Unknown flags make argparse exit.


@dataclass(frozen=True)
class BuildFlag:
    name: str
    type: str  # int, path, enum (accepted lists the values) or switch (store_true: no value)
    read_in: str
    accepted: tuple[str, ...] = ()


_CMD, _PLUGIN = "commands/build.py parse_arguments", "plugin/plugin.py PluginConfig (add_plugin_argument)"
_PLUGIN_DTYPES = ("auto", "float16", "bfloat16", "float32", "disable")
BUILD_FLAGS: dict[str, BuildFlag] = {
    f.name: f
    for f in [
        BuildFlag("checkpoint_dir", "path", _CMD),
        BuildFlag("output_dir", "path", _CMD),
        BuildFlag("max_batch_size", "int", _CMD),
        BuildFlag("max_input_len", "int", _CMD),
        BuildFlag("max_seq_len", "int", _CMD),
        BuildFlag("max_num_tokens", "int", _CMD),
        BuildFlag("max_beam_width", "int", _CMD),
        BuildFlag(
            "kv_cache_type",
            "enum",
            _CMD + " (enum_type(KVCacheType), case-insensitive)",
            ("continuous", "paged", "disabled"),
        ),
        BuildFlag("workers", "int", _CMD),
        BuildFlag("gpt_attention_plugin", "enum", _PLUGIN, _PLUGIN_DTYPES),
        BuildFlag("gemm_plugin", "enum", _PLUGIN, _PLUGIN_DTYPES + ("fp8", "nvfp4")),
        BuildFlag("remove_input_padding", "enum", _PLUGIN, ("enable", "disable")),
        BuildFlag("context_fmha", "enum", _PLUGIN, ("enable", "disable")),
        BuildFlag("use_paged_context_fmha", "enum", _PLUGIN, ("enable", "disable")),
        BuildFlag("tokens_per_block", "int", _PLUGIN),
        # Keeps every generated token's logits ([batch, vocab] per step, copied to the host for requests
        # with return_generation_logits); the executor refuses return_generation_logits without it.
        BuildFlag("gather_generation_logits", "switch", _CMD + " (store_true)"),
    ]
}


def check_build_flags(flags: dict[str, str]) -> list[str]:
    """Problems with trtllm-build flags (name without "--" -> value; "" for a switch) against what
    trtllm-build accepts."""
    problems = []
    for name, value in flags.items():
        f = BUILD_FLAGS.get(name)
        if f is None:
            problems.append(f"--{name}: not a trtllm-build flag of TensorRT-LLM {TENSORRT_LLM_VERSION}")
        elif f.type == "int" and not (value.isdigit() and int(value) > 0):
            problems.append(f"--{name}: {value!r} is not a positive integer")
        elif f.type == "switch" and value != "":
            problems.append(f"--{name}: a switch (store_true) takes no value, got {value!r}")
        elif f.type == "enum" and value.lower() not in f.accepted:
            problems.append(f"--{name}: {value!r} is not one of {', '.join(f.accepted)}")
    return problems
