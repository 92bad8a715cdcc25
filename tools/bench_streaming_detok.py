#!/usr/bin/env python3
"""Per-token cost of exact streaming on the tensorrtllm layout, at short and long outputs.

TensorRT-LLM's backend streams one response per token with nothing before it. The relay
(llmserve/pipeline/relay.py) turns each into a chunk with its context (output_context_ids) and
postprocessing decodes it statelessly (pipeline/postprocess.py). This times, per token, in process
(no Triton, no IPC), with the SmolLM2 tokenizer and a SentencePiece byte-fallback tokenizer, on mixed
Latin / CJK / emoji text:

  relay + postprocess   what the layout runs per streamed token (RelayStream.push + postprocess)
  context window        the decode alone (Detokenizer.decode with CONTEXT_TOKENS of context)
  re-decode all         the alternative: decode every token so far at each chunk, keep the new text
  DecodeStream          tokenizers' stateful decoder (one process keeps the stream's state)
  chunk alone           the layout before the relay (not exact: lost characters and spaces)

    python tools/bench_streaming_detok.py [--tokens 10 4000]

The per-response IPC of a Python model hop (hundreds of microseconds, docs/PERFORMANCE.md) is not in
these numbers; the relay adds one such hop per streamed response."""

from __future__ import annotations

import argparse
import sys
import time

from tokenizers import Tokenizer, decoders, models, normalizers
from tokenizers.decoders import DecodeStream

from llmserve.contract import CONTEXT_TOKENS
from llmserve.engine.sampling import SamplingParams
from llmserve.pipeline.postprocess import postprocess
from llmserve.pipeline.relay import RelayStream
from llmserve.request.token_request import EngineRequest
from llmserve.spec import ROOT
from llmserve.text.detokenize import Detokenizer
from llmserve.text.tokenizer import load_fast

TEXT = "The quick brown fox jumps over the lazy dog. 你好，世界！🎉👩‍👩‍👧 Écris en français. 日本語で答えてください。\n"


def sentencepiece() -> Tokenizer:
    """Llama / Mistral form: "▁" spaces, byte fallback for what the small vocabulary lacks."""
    vocab = {"<unk>": 0, **{f"<0x{i:02X}>": 1 + i for i in range(256)}}
    for ch in "▁abcdefghijklmnopqrstuvwxyzTE.,!\n":
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


def relay_and_postprocess(tok, det, ids):
    req = EngineRequest(
        prompt=[1],
        params=SamplingParams(max_new_tokens=len(ids)),
        streaming=True,
        exclude_input_in_output=True,
        return_log_probs=False,
    )
    stream, out = RelayStream(req, tok), []
    for t in ids:
        chunk = stream.push([t], None)
        if chunk is not None:
            out.append(postprocess(det, chunk.get)["text_output"][0].decode())
    last = stream.finish()
    if last is not None:
        out.append(postprocess(det, last.get)["text_output"][0].decode())
    return "".join(out)


def context_window(tok, det, ids):
    return "".join(det.decode(ids[i : i + 1], ids[max(0, i - CONTEXT_TOKENS) : i]) for i in range(len(ids)))


def redecode_all(tok, det, ids):
    out, prev = [], ""
    for i in range(len(ids)):
        cur = det.visible(ids[: i + 1])
        out.append(cur[len(prev) :] if cur.startswith(prev) else "")
        prev = cur
    return "".join(out)


def decode_stream(tok, det, ids):
    ds = DecodeStream(skip_special_tokens=True)
    return "".join(p or "" for p in (ds.step(tok, t) for t in ids))


def chunk_alone(tok, det, ids):
    return "".join(det.visible([t]) for t in ids)


DESIGNS = [
    ("relay + postprocess", relay_and_postprocess),
    ("context window", context_window),
    ("re-decode all", redecode_all),
    ("DecodeStream", decode_stream),
    ("chunk alone", chunk_alone),
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, nargs="+", default=[10, 4000])
    ap.add_argument("--tokenizer", default=str(ROOT / "build/checkpoints/smollm2-135m-instruct"))
    args = ap.parse_args(argv)
    tokenizers = [
        ("SmolLM2 (byte-level BPE)", load_fast(args.tokenizer)),
        ("SentencePiece byte fallback", sentencepiece()),
    ]
    print(f"{'tokenizer':28s} {'design':20s} " + " ".join(f"{n:>8d} tok" for n in args.tokens) + "  exact")
    for tname, tok in tokenizers:
        det = Detokenizer(tok)
        all_ids = tok.encode(TEXT * (1 + max(args.tokens) // 20)).ids
        for name, fn in DESIGNS:
            cells, exact = [], True
            for n in args.tokens:
                ids = all_ids[:n]
                reps = max(1, min(50, 20000 // n)) if name != "re-decode all" else max(1, min(20, 200 // n))
                best = float("inf")
                for _ in range(reps):
                    t0 = time.perf_counter()
                    text = fn(tok, det, ids)
                    best = min(best, time.perf_counter() - t0)
                exact &= text == det.visible(ids)
                cells.append(f"{best / n * 1e6:8.1f} µs")
            print(f"{tname:28s} {name:20s} " + " ".join(f"{c:>12s}" for c in cells) + f"  {'yes' if exact else 'NO'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
