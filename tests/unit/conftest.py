from pathlib import Path

import pytest

from llmserve.spec import ROOT

SMOLLM2 = ROOT / "build/checkpoints/smollm2-135m-instruct"


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    if not (SMOLLM2 / "tokenizer.json").exists():
        pytest.fail("build the default checkpoint first: python scripts/build_engine.py --spec specs/default.yaml")
    return SMOLLM2


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory, smollm2_dir) -> Path:
    """A random 2-layer Llama with GQA and untied embeddings, saved as a HF checkpoint."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    out = tmp_path_factory.mktemp("tiny-llama")
    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      tie_word_embeddings=False, eos_token_id=tok.eos_token_id)
    LlamaForCausalLM(cfg).save_pretrained(out)
    tok.save_pretrained(out)
    return out
