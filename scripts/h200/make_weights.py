"""Random bf16 weights for the 1.2B Llama shape of bench-1b.yaml, built on the GPU (seconds, not the
minutes and 4.8 GB of the fp32 CPU build), saved as a normal safetensors checkpoint."""

import json
import shutil
import sys
import time
from pathlib import Path

import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

tok_dir, out = Path(sys.argv[1]), Path(sys.argv[2])
if (out / "llmserve-checkpoint.json").exists():
    print(f"{out} exists")
    sys.exit(0)
t0 = time.time()
tok = AutoTokenizer.from_pretrained(tok_dir)
torch.manual_seed(0)
config = LlamaConfig(
    vocab_size=len(tok),
    hidden_size=2048,
    intermediate_size=8192,
    num_hidden_layers=16,
    num_attention_heads=32,
    num_key_value_heads=8,
    max_position_embeddings=4096,
    tie_word_embeddings=True,
    bos_token_id=tok.bos_token_id,
    eos_token_id=tok.eos_token_id,
    pad_token_id=tok.pad_token_id,
)
with torch.device("cuda"):
    model = LlamaForCausalLM(config).to(torch.bfloat16)
n = sum(p.numel() for p in model.parameters())
model.save_pretrained(out)
for f in tok_dir.iterdir():
    shutil.copy2(f, out / f.name)
(out / "llmserve-checkpoint.json").write_text(json.dumps({"spec": "bench-1b-random", "params": n}))
print(f"{n / 1e9:.3f}B parameters written to {out} in {time.time() - t0:.1f} s")
