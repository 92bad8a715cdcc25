"""One way to build the torch engine from the model's options, shared by the two places it runs: in
the stub's own process (EngineService) and in a process of its own (engine_child, when
engine.torch.engine_process is on), so both serve the same engine with the same knobs."""

from __future__ import annotations

from dataclasses import dataclass

from ..engine import guided
from ..engine.engine import Engine
from ..engine.llama import LlamaConfig
from ..engine.loader import load_model
from ..text.tokenizer import load_fast, load_hf_tokenizer
from .options import EngineOptions


@dataclass
class Built:
    cfg: LlamaConfig
    grammars: guided.GrammarCache
    engine: Engine


def build_engine(opts: EngineOptions, tokenizer_info_path: str | None = None, engine_cls: type = Engine) -> Built:
    """Guided decoding sees the vocabulary through xgrammar's tokenizer info: built from the
    checkpoint's own HF tokenizer (local files only), or, for the stand-in, read from the file the
    C++ backend reads (xgrammar_tokenizer_info_path, text/xgrammar_info.py). The engine is not started."""
    model = load_model(
        opts.checkpoint_dir,
        device=opts.device,
        dtype=opts.dtype,
        max_slots=opts.max_batch_size,
        max_seq_len=opts.max_input_len + opts.max_output_len,
        cuda_graphs=opts.cuda_graphs,
        triton_kernels=opts.triton_kernels,
        threads=opts.threads,
        max_input_len=opts.max_input_len,
    )
    if tokenizer_info_path:
        tokenizer_info = guided.tokenizer_info_from_file(tokenizer_info_path, model.cfg.vocab_size)
    else:
        tokenizer_info = guided.tokenizer_info_from_hf(
            load_hf_tokenizer(opts.checkpoint_dir), model.cfg.vocab_size, model.cfg.eos_token_ids
        )
    engine = engine_cls(
        model,
        load_fast(opts.checkpoint_dir),
        prefill_token_budget=opts.prefill_token_budget,
        skip_special_tokens=opts.skip_special_tokens,
        max_waiting=opts.max_queue_size,
        request_timeout_s=opts.request_timeout_s,
        stream_interval_s=opts.stream_interval_ms / 1000,
        cancel_poll_s=opts.cancellation_check_period_ms / 1000,
    )
    return Built(model.cfg, guided.GrammarCache(tokenizer_info), engine)
