from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders, models, normalizers

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
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=False,
        eos_token_id=tok.eos_token_id,
    )
    LlamaForCausalLM(cfg).save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def sentencepiece():
    """A SentencePiece-style tokenizer (the Llama / Mistral form: "▁" for spaces, byte fallback for
    what the vocabulary lacks, a decoder that strips the first space): Latin letters and a few merges,
    so CJK, emoji and accents go through byte tokens."""
    vocab = {"<unk>": 0, **{f"<0x{i:02X}>": 1 + i for i in range(256)}}
    for ch in "▁abcdefghijklmnopqrstuvwxyzT.,":
        vocab.setdefault(ch, len(vocab))
    merges = [("▁", "t"), ("▁t", "h"), ("▁th", "e"), ("o", "x")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, byte_fallback=True, unk_token="<unk>"))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    return tok
