"""Build a TensorRT-LLM engine for in-flight batching from a spec (engine.kind = tensorrtllm).

  1. the Hugging Face checkpoint (llmserve.checkpoint.build_checkpoint),
  2. a TensorRT-LLM checkpoint, through TensorRT-LLM's Python API (`<Model>.from_hugging_face(...)`
     then `save_checkpoint`, one rank at a time: what the per-architecture convert_checkpoint.py
     scripts do) run as `python -m llmserve.trtllm.build convert ...`,
  3. `trtllm-build` with the flags in-flight batching needs (GPT attention plugin, packed input,
     paged KV cache; use_paged_context_fmha for KV reuse / chunked context),
  4. the tokenizer-info file guided decoding needs (xgrammar_tokenizer_info.json, from the
     checkpoint's tokenizer: text/xgrammar_info.py) and a build manifest next to the engine
     (llmserve-build.json: spec hash, TensorRT-LLM version, flags, commands), written last; the
     engine appears under its final name only when complete.

Everything is validated before anything runs. `--dry-run` prints the exact commands and needs
neither TensorRT-LLM nor a GPU. Build inside the same image that serves: an engine deserializes only
with the TensorRT(-LLM) version that built it."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from ..checkpoint import build_checkpoint, is_built
from ..spec import ROOT, Spec
from ..spec.trtllm import engine_dir, max_num_tokens, trtllm_checkpoint_dir, xgrammar_tokenizer_info_path
from ..text import xgrammar_info
from ..text.tokenizer import load_hf_tokenizer
from . import upstream as U
from .config import model_shape
from .placement import ModelShape

MANIFEST = "llmserve-build.json"
CONVERTED = "llmserve-convert.json"  # written last into the TensorRT-LLM checkpoint

# Hugging Face architecture -> TensorRT-LLM model class (tensorrt_llm.models), for the
# architectures this project has checked the conversion arguments of.
SUPPORTED = {"LlamaForCausalLM": "LLaMAForCausalLM", "MistralForCausalLM": "LLaMAForCausalLM"}


log = logging.getLogger(__name__)


# --- validation ---------------------------------------------------------------------------------


def validate(spec: Spec, shape: ModelShape | None) -> list[str]:
    """Every reason the build cannot work, before anything runs."""
    e, t = spec.engine, spec.engine.tensorrtllm
    errors = []
    if t.world_size > t.visible_gpus:
        errors.append(f"tp_size*pp_size = {t.world_size} GPUs per instance, but visible_gpus is {t.visible_gpus}")
    n_tokens = max_num_tokens(spec)
    if n_tokens < e.max_input_len and not t.enable_chunked_context:
        errors.append(
            f"max_num_tokens {n_tokens} < max_input_len {e.max_input_len} without enable_chunked_context: "
            "the longest admitted prompt could never be scheduled"
        )
    if shape is None:
        return errors
    if shape.architecture not in SUPPORTED:
        errors.append(
            f"architecture {shape.architecture or '(none)'} is not supported by this build script "
            f"(supported: {', '.join(sorted(SUPPORTED))})"
        )
    if shape.max_position_embeddings and e.max_seq_len > shape.max_position_embeddings:
        errors.append(
            f"max_seq_len = max_input_len + max_output_len = {e.max_seq_len} exceeds the model's "
            f"max_position_embeddings {shape.max_position_embeddings}"
        )
    if shape.num_heads % t.tp_size:
        errors.append(f"tp_size {t.tp_size} does not divide num_attention_heads {shape.num_heads}")
    if shape.num_kv_heads % t.tp_size and t.tp_size % shape.num_kv_heads:
        errors.append(f"tp_size {t.tp_size} and num_key_value_heads {shape.num_kv_heads}: one must divide the other")
    if t.pp_size > shape.num_layers:
        errors.append(f"pp_size {t.pp_size} exceeds num_hidden_layers {shape.num_layers}")
    return errors


def visible_gpu_count() -> int | None:
    """GPUs this process can use (None when it cannot tell: no nvidia-smi)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    out = subprocess.run([smi, "-L"], capture_output=True, text=True)
    if out.returncode != 0:
        return 0
    gpus = [line for line in out.stdout.splitlines() if line.startswith("GPU ")]
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return min(len(gpus), len([x for x in env.split(",") if x.strip()]))
    return len(gpus)


# --- commands --------------------------------------------------------------------------------------


def build_flags(spec: Spec) -> dict[str, str]:
    """trtllm-build flags derived from the spec (names exactly as trtllm-build spells them)."""
    e, t = spec.engine, spec.engine.tensorrtllm
    paged_context = t.enable_kv_cache_reuse or t.enable_chunked_context
    flags = {
        "max_batch_size": str(e.max_batch_size),
        "max_input_len": str(e.max_input_len),
        "max_seq_len": str(e.max_seq_len),
        "max_num_tokens": str(max_num_tokens(spec)),
        "max_beam_width": str(t.max_beam_width),
        # In-flight batching: GPT attention plugin + packed input + paged KV cache (all three).
        "gpt_attention_plugin": t.dtype,
        "remove_input_padding": "enable",
        "kv_cache_type": "paged",
        "tokens_per_block": str(t.tokens_per_block),
        "gemm_plugin": t.dtype,
        "context_fmha": "disable" if t.dtype == "float32" else "enable",
        # KV-cache reuse and chunked context read the paged cache during the context phase.
        "use_paged_context_fmha": "enable" if paged_context else "disable",
        "workers": str(t.workers or min(t.world_size, t.visible_gpus)),
    }
    if t.gather_generation_logits:  # top log-probs in this layout (docs/tensorrtllm.md): a switch, no value
        flags["gather_generation_logits"] = ""
    return flags


def commands(spec: Spec) -> dict[str, list[str]]:
    t = spec.engine.tensorrtllm
    out = engine_dir(spec)
    convert = [
        sys.executable,
        "-m",
        "llmserve.trtllm.build",
        "convert",
        *convert_args(spec.checkpoint_path(), trtllm_checkpoint_dir(spec), t.dtype, t.tp_size, t.pp_size),
    ]
    build = ["trtllm-build", "--checkpoint_dir", str(trtllm_checkpoint_dir(spec)), "--output_dir", str(partial(out))]
    flags = build_flags(spec)
    problems = U.check_build_flags(flags)
    if problems:  # the table of what trtllm-build accepts (trtllm/upstream.py)
        raise ValueError("trtllm-build would refuse these flags:\n  " + "\n  ".join(problems))
    for k, v in flags.items():
        build += [f"--{k}", v] if v else [f"--{k}"]
    return {"convert": convert, "build": build}


def convert_args(model_dir: Path, output_dir: Path, dtype: str, tp_size: int, pp_size: int) -> list[str]:
    return [
        "--model_dir",
        str(model_dir),
        "--output_dir",
        str(output_dir),
        "--dtype",
        dtype,
        "--tp_size",
        str(tp_size),
        "--pp_size",
        str(pp_size),
    ]


def partial(path: Path) -> Path:
    return path.with_name(path.name + ".partial")


def _sha256(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def trtllm_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    for name in ("tensorrt_llm", "tensorrt-llm"):
        try:
            return version(name)
        except PackageNotFoundError:
            continue
    return None


def _manifest_matches(out: Path, build_sha: str) -> bool:
    f = out / MANIFEST
    if not f.exists():
        return False
    try:
        return json.loads(f.read_text()).get("build_sha256") == build_sha
    except ValueError:
        return False


def _run(cmd: list[str]) -> None:
    log.info("$ " + shlex.join(cmd))
    subprocess.run(cmd, check=True, cwd=ROOT)


# --- entry point (scripts/build_engine.py) -------------------------------------------------------


def build_trtllm_engine(spec: Spec, spec_path, dry_run: bool = False, force: bool = False) -> int:
    t = spec.engine.tensorrtllm
    ckpt, tllm, out = spec.checkpoint_path(), trtllm_checkpoint_dir(spec), engine_dir(spec)
    shape = model_shape(spec, None)  # the checkpoint's config.json, else GGUF metadata
    errors = validate(spec, shape)
    if errors:
        raise ValueError("cannot build the engine:\n  " + "\n  ".join(errors))
    cmds = commands(spec)
    flags = build_flags(spec)
    spec_text = Path(spec_path).read_bytes() if Path(spec_path).exists() else b""
    build_inputs = {
        "flags": flags,
        "convert": cmds["convert"][4:],
        "checkpoint": str(ckpt),
        "source": spec.model.source.model_dump(),
    }
    build_sha = _sha256(build_inputs)

    if dry_run:
        print(f"# spec {spec_path} -> engine {out}")
        if shape is None:
            print(
                "# model shape unknown until the checkpoint exists: architecture, max_position_embeddings and "
                "head counts are checked then"
            )
        else:
            print(
                f"# checked against {shape.source}: {shape.architecture}, max_position_embeddings "
                f"{shape.max_position_embeddings}, {shape.num_heads} heads / {shape.num_kv_heads} KV heads, "
                f"tp_size {t.tp_size}, pp_size {t.pp_size}"
            )
        if is_built(ckpt):
            print(f"# 1. checkpoint {ckpt} is up to date")
        else:
            print(f"# 1. build checkpoint {ckpt} from {spec.model.source.kind} (llmserve.checkpoint.build_checkpoint)")
        print("# 2. convert to a TensorRT-LLM checkpoint (TensorRT-LLM Python API)")
        print(shlex.join(cmds["convert"]))
        print("# 3. build the engine")
        print(shlex.join(cmds["build"]))
        print(
            f"# 4. write {xgrammar_info.FILE_NAME} and {MANIFEST} into it, then rename {partial(out).name} -> {out.name}"
        )
        if _manifest_matches(out, build_sha) and not force:
            print(f"# (the engine in {out} already matches these flags: a real run would skip 2-4)")
        return 0

    if _manifest_matches(out, build_sha) and not force:
        if not xgrammar_tokenizer_info_path(spec).exists():  # an engine built before guided decoding
            write_xgrammar_tokenizer_info(spec, out)
        log.info(f"engine {out} is up to date (same flags; --force rebuilds)")
        return 0
    version = trtllm_version()
    if version is None or shutil.which("trtllm-build") is None:
        raise ValueError(
            "TensorRT-LLM is not installed here (no tensorrt_llm package / trtllm-build): build inside "
            "the serving image, see docs/tensorrtllm.md. --dry-run prints the commands"
        )
    gpus = visible_gpu_count()
    if gpus is not None and gpus < t.world_size:
        raise ValueError(f"tp_size*pp_size = {t.world_size} but {gpus} GPU(s) are visible to this build")
    started = time.time()
    build_checkpoint(spec, force=False)
    if shape is None:  # the checkpoint exists only now: check what could not be checked before
        shape = model_shape(spec, None)
        errors = validate(spec, shape)
        if errors:
            raise ValueError("cannot build the engine:\n  " + "\n  ".join(errors))
    convert_sha = _sha256(cmds["convert"][4:])
    marker = tllm / CONVERTED
    if force or not marker.exists() or json.loads(marker.read_text()).get("sha256") != convert_sha:
        shutil.rmtree(tllm, ignore_errors=True)
        _run(cmds["convert"])
    else:
        log.info(f"TensorRT-LLM checkpoint {tllm} is up to date")
    shutil.rmtree(partial(out), ignore_errors=True)
    _run(cmds["build"])
    write_xgrammar_tokenizer_info(spec, partial(out))
    manifest = {
        "spec": str(spec_path),
        "spec_name": spec.name,
        "spec_sha256": hashlib.sha256(spec_text).hexdigest(),
        "build_sha256": build_sha,
        "tensorrt_llm_version": version,
        "flags": flags,
        "commands": {k: shlex.join(v) for k, v in cmds.items()},
        "checkpoint": str(ckpt),
        "model_shape": shape.__dict__ if shape else None,
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "build_seconds": round(time.time() - started, 1),
    }
    (partial(out) / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    partial(out).rename(out)
    log.info(f"engine ready at {out} (TensorRT-LLM {version}, {manifest['build_seconds']} s)")
    return 0


def write_xgrammar_tokenizer_info(spec: Spec, out: Path) -> Path:
    """What upstream's generate_xgrammar_tokenizer_info.py writes, from the checkpoint's own tokenizer
    (local files only), into `out` (the engine directory, or the one being built): the config's
    xgrammar_tokenizer_info_path (spec/trtllm.xgrammar_tokenizer_info_path) names it there."""
    tok = load_hf_tokenizer(str(spec.checkpoint_path()), spec.model.trust_remote_code)
    return xgrammar_info.write(tok, out / xgrammar_info.FILE_NAME)


# --- conversion (runs where TensorRT-LLM is installed) -------------------------------------------


def compat_hf_config(cfg: dict) -> dict:
    """config.json as the transformers version inside the TensorRT-LLM image reads it. transformers
    5 writes `rope_parameters` and `dtype`; transformers 4.x reads `rope_theta` / `rope_scaling` and
    `torch_dtype`, and silently falls back to rope_theta 10000 without them (wrong output for
    SmolLM2, whose rope_theta is 100000)."""
    cfg = dict(cfg)
    rope = cfg.get("rope_parameters")
    if isinstance(rope, dict):
        if "rope_theta" not in cfg and "rope_theta" in rope:
            cfg["rope_theta"] = rope["rope_theta"]
        scaling = {k: v for k, v in rope.items() if k != "rope_theta"}
        if "rope_scaling" not in cfg and scaling.get("rope_type", "default") != "default":
            cfg["rope_scaling"] = scaling
    if "torch_dtype" not in cfg and "dtype" in cfg:
        cfg["torch_dtype"] = cfg["dtype"]
    return cfg


def _staged(model_dir: Path, work: Path) -> Path:
    """model_dir with a compatible config.json: links to every other file, nothing copied."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    for f in model_dir.iterdir():
        if f.name != "config.json":
            (work / f.name).symlink_to(f.resolve())
    cfg = json.loads((model_dir / "config.json").read_text())
    (work / "config.json").write_text(json.dumps(compat_hf_config(cfg), indent=2))
    return work


def convert(model_dir: Path, output_dir: Path, dtype: str, tp_size: int, pp_size: int) -> None:
    cfg = json.loads((model_dir / "config.json").read_text())
    arch = (cfg.get("architectures") or [""])[0]
    if arch not in SUPPORTED:
        raise ValueError(f"architecture {arch} is not supported (supported: {', '.join(sorted(SUPPORTED))})")
    import tensorrt_llm.models as models
    from tensorrt_llm.mapping import Mapping

    model_cls = getattr(models, SUPPORTED[arch])
    staged = _staged(model_dir, output_dir.with_name(output_dir.name + ".hf"))
    output_dir.mkdir(parents=True, exist_ok=True)
    world = tp_size * pp_size
    for rank in range(world):
        started = time.time()
        mapping = Mapping(world_size=world, rank=rank, tp_size=tp_size, pp_size=pp_size)
        model = model_cls.from_hugging_face(str(staged), dtype, mapping=mapping)
        model.save_checkpoint(str(output_dir), save_config=(rank == 0))
        del model
        log.info(f"converted rank {rank + 1}/{world} in {time.time() - started:.1f} s")
    shutil.rmtree(staged, ignore_errors=True)
    args = convert_args(model_dir, output_dir, dtype, tp_size, pp_size)
    (output_dir / CONVERTED).write_text(json.dumps({"sha256": _sha256(args), "args": args}, indent=2))


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="TensorRT-LLM steps of scripts/build_engine.py")
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("convert", help="Hugging Face checkpoint -> TensorRT-LLM checkpoint")
    c.add_argument("--model_dir", required=True, type=Path)
    c.add_argument("--output_dir", required=True, type=Path)
    c.add_argument("--dtype", required=True, choices=["float16", "bfloat16", "float32"])
    c.add_argument("--tp_size", type=int, default=1)
    c.add_argument("--pp_size", type=int, default=1)
    args = ap.parse_args(argv)
    from ..logs import configure

    configure("info")  # its progress lines: this runs as a child process of build_trtllm_engine
    try:
        convert(args.model_dir, args.output_dir, args.dtype, args.tp_size, args.pp_size)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
