"""postprocessing: token ids of engine responses -> text, plus the log-prob outputs.

Text: exact detokenization of whole outputs and of streamed chunks (text/detokenize.py), for the
whole dynamic batch in one tokenizer call. Log probs: passed through when the engine sent them;
TensorRT-LLM sends them only when the request sets return_log_probs, so otherwise zeros (one per
token, the shape of real ones), as upstream's postprocessing does, so that every ensemble response
has every output whatever the engine. Token ids: the chunk's output_ids (up to sequence_length), so
a client knows which token each log prob belongs to."""

from __future__ import annotations

import numpy as np

from ..contract import UPSTREAM_POSTPROCESSING_NAMES
from ..errors import RequestError
from ..request.reader import Reader
from ..text.detokenize import Detokenizer


def _log_probs(read: Reader, beams: int, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    cum, per_token = read("cum_log_probs"), read("output_log_probs")
    if cum is None:
        cum = np.zeros((1, beams), dtype=np.float32)
    if per_token is None:
        per_token = np.zeros((1, beams, int(lengths.max()) if lengths.size else 0), dtype=np.float32)
    return cum.astype(np.float32), per_token.astype(np.float32)


def _top(read: Reader, lengths: np.ndarray) -> dict[str, np.ndarray]:
    """The engine's alternatives per token ([1, n, k]) when the request asked for some, else [1, n, 0]:
    the ensemble answers every output it declares, whatever the request."""
    ids, lps = read("top_token_ids"), read("top_log_probs")
    if ids is None or lps is None:
        n = int(lengths.max()) if lengths.size else 0
        return {"top_token_ids": np.zeros((1, n, 0), np.int32), "top_log_probs": np.zeros((1, n, 0), np.float32)}
    return {"top_token_ids": ids.astype(np.int32), "top_log_probs": lps.astype(np.float32)}


def postprocess_batch(detok: Detokenizer, reads: list[Reader]) -> list[dict[str, np.ndarray] | Exception]:
    """One result per request: its output tensors, or the exception a malformed request raised."""
    results: list = [None] * len(reads)
    items, owners = [], []  # owners: (request index, beams, log probs)
    upstream = [read("TOKENS_BATCH") is not None for read in reads]  # upstream's names: answered as OUTPUT
    reads = [_upstream_reader(read) if up else read for read, up in zip(reads, upstream)]
    for i, read in enumerate(reads):
        try:
            ids, lengths = read("output_ids"), read("sequence_length")  # [1, beam, n], [1, beam]
            if ids is None or lengths is None:
                raise RequestError(
                    "output_ids",
                    "output_ids and sequence_length (or upstream's TOKENS_BATCH and SEQUENCE_LENGTH) are required",
                )
            context = read("output_context_ids")  # [1, beam, <= CONTEXT_TOKENS] or absent
            beams = [
                (ids[0, b, : lengths[0, b]].tolist(), context[0, b].tolist() if context is not None else [])
                for b in range(ids.shape[1])
            ]
            log_probs = _log_probs(read, len(beams), lengths)
            top = _top(read, lengths)
        except Exception as e:  # a malformed tensor from a direct caller: an error, not a crash
            results[i] = e
            continue
        owners.append((i, len(beams), log_probs, ids[:, :, : int(lengths.max()) if lengths.size else 0], top))
        items.extend(beams)
    texts = iter(detok.decode_many(items)) if items else iter(())
    for i, beams, (cum, per_token), token_ids, top in owners:
        if upstream[i]:
            results[i] = {"OUTPUT": np.array([next(texts).encode("utf-8") for _ in range(beams)], dtype=np.object_)}
            continue
        # One string per beam and no batch dimension, as upstream's postprocessing answers (its
        # clients read text_output[0] as the text: [1, 1] broke NVIDIA's end_to_end_grpc_client.py).
        results[i] = {
            "text_output": np.array([next(texts).encode("utf-8") for _ in range(beams)], dtype=np.object_),
            "cum_log_probs": cum,
            "output_log_probs": per_token,
            "output_token_ids": token_ids.astype(np.int32),
            **top,
        }
    return results


def _upstream_reader(read: Reader) -> Reader:
    theirs = {ours: up for up, ours in UPSTREAM_POSTPROCESSING_NAMES.items()}
    return lambda name: read(theirs.get(name, name))


def postprocess(detok: Detokenizer, read: Reader) -> dict[str, np.ndarray]:
    (result,) = postprocess_batch(detok, [read])
    if isinstance(result, Exception):
        raise result
    return result
