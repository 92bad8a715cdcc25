"""NVIDIA's own clients for the TensorRT-LLM Triton backend, against both layouts (issue 18).

Each test sends exactly what one upstream script sends (tensor names, dtypes, shapes, request ids,
request parameters, requested outputs) and asserts what the script asserts or reads, so the script
itself would pass. The scripts are TensorRT-LLM's `triton_backend/` (formerly tensorrtllm_backend):

- inflight_batcher_llm/client/end_to_end_grpc_client.py at 2a9abd9
- inflight_batcher_llm/client/inflight_batcher_llm_client.py at 000a01d
- tools/inflight_batcher_llm/end_to_end_test.py at 89fd9b7 (unchanged on a serving.streaming: false deployment)
- tools/inflight_batcher_llm/benchmark_core_model.py at 0249976

docs/upstream-compatibility.md says how to run the scripts themselves."""

from __future__ import annotations

import queue
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import yaml
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from llmserve.spec import ROOT
from llmserve.text.tokenizer import load_fast

from ..conftest import start_server, stop
from .client import generate, generate_stream

pytestmark = pytest.mark.e2e

PROMPT_IDS = [1, 504, 3458, 314, 260]  # token ids of the tiny model's (SmolLM2's) vocabulary


def _tensor(name: str, arr: np.ndarray) -> grpcclient.InferInput:
    """What every upstream script's prepare_tensor does."""
    t = grpcclient.InferInput(name, list(arr.shape), np_to_triton_dtype(arr.dtype))
    t.set_data_from_numpy(arr)
    return t


def _collect(server, model: str, requests: list, *, stop_after_first: tuple | None = None, timeout: float = 120):
    """The scripts' stream use: start_stream, async_stream_infer each request, stop_stream, then read
    the callback queue. `stop_after_first`: (inputs, request_id, parameters) sent once the first
    response has arrived (the scripts sleep --stop-after-ms instead)."""
    results: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc)
    client.start_stream(callback=lambda result, error: results.put(error if error else result))
    for inputs, request_id, outputs in requests:
        client.async_stream_infer(model, inputs, outputs=outputs, request_id=request_id)
    got = []
    if stop_after_first is not None:
        got.append(results.get(timeout=timeout))
        inputs, request_id, parameters = stop_after_first
        client.async_stream_infer(model, inputs, request_id=request_id, parameters=parameters)
    client.stop_stream()  # waits for the server to close the stream
    while not results.empty():
        got.append(results.get())
    client.close()
    return got


# --- end_to_end_grpc_client.py -> ensemble ------------------------------------------------------------


def _e2e_grpc_inputs(prompt: str, output_len: int = 100, streaming: bool = False, **options) -> list:
    """prepare_inputs() with the script's defaults: temperature 1.0, beam_width 1, exclude_input_in_output
    always sent (False unless --exclude-input-in-output), num_return_sequences only with -n."""
    inputs = {
        "text_input": np.array([[prompt]]).astype(object),
        "max_tokens": np.ones_like([[prompt]]).astype(np.int32) * output_len,
        "stream": np.array([[streaming]], dtype=bool),
        "beam_width": np.array([[1]], dtype=np.int32),
        "temperature": np.array([[1.0]], dtype=np.float32),
    }
    if options.get("stop_words"):
        inputs["stop_words"] = np.array([options["stop_words"]], dtype=object)
    if options.get("bad_words"):
        inputs["bad_words"] = np.array([options["bad_words"]], dtype=object)
    if options.get("return_log_probs"):
        inputs["return_log_probs"] = np.array([[True]], dtype=bool)
    inputs["exclude_input_in_output"] = np.array([[options.get("exclude_input_in_output", False)]], dtype=bool)
    return [_tensor(k, v) for k, v in inputs.items()]


def _e2e_grpc_text(server, streaming: bool, request_id: str = "", **options) -> str:
    """run_inference(): text_output read as `output[0].decode()` (upstream's shape [1]); streamed
    chunks appended; errors are printed by the script, so here they fail the test."""
    outputs = [grpcclient.InferRequestedOutput("text_output")]
    if options.get("return_log_probs"):
        outputs += [
            grpcclient.InferRequestedOutput("cum_log_probs"),
            grpcclient.InferRequestedOutput("output_log_probs"),
        ]
    got = _collect(
        server,
        "ensemble",
        [
            (
                _e2e_grpc_inputs("Born in north-east France, Soyer trained as a", 24, streaming, **options),
                request_id,
                outputs,
            )
        ],
    )
    text = ""
    for result in got:
        assert not isinstance(result, InferenceServerException), result
        output = result.as_numpy("text_output")
        assert result.as_numpy("batch_index") is None and result.as_numpy("sequence_index") is None
        text = text + output[0].decode("utf-8") if streaming else output[0].decode("utf-8")
        if options.get("return_log_probs"):
            assert result.as_numpy("output_log_probs") is not None and result.as_numpy("cum_log_probs") is not None
    return text


@pytest.mark.parametrize("streaming", [False, True], ids=["unary", "streaming"])
def test_end_to_end_grpc_client(layout_server, streaming):
    """end_to_end_grpc_client.py -p ... [-S] [--request-id 7] [--stop-words ..] [--bad-words ..]
    [--exclude-input-in-output] [--return-log-probs] (TensorRT-LLM triton_backend 2a9abd9)."""
    plain = _e2e_grpc_text(layout_server, streaming)
    assert plain
    # temperature 1.0 alone (the script's default) is greedy, as in TensorRT-LLM: the same text again.
    assert _e2e_grpc_text(layout_server, streaming, request_id="7") == plain
    excluded = _e2e_grpc_text(
        layout_server,
        streaming,
        exclude_input_in_output=True,
        return_log_probs=True,
        bad_words=["zebra"],
        stop_words=["unlikely stop"],
    )
    assert excluded and plain.endswith(excluded)


# --- inflight_batcher_llm_client.py -> tensorrt_llm -------------------------------------------------


def _ibl_inputs(output_len: int, streaming: bool) -> list:
    """prepare_inputs() with the script's defaults (--top-k 1, --top-p 0, --temperature 1.0, end/pad id
    from the tokenizer)."""
    return [
        _tensor("input_ids", np.array([PROMPT_IDS], dtype=np.int32)),
        _tensor("input_lengths", np.array([[len(PROMPT_IDS)]], dtype=np.int32)),
        _tensor("request_output_len", np.array([[output_len]], dtype=np.int32)),
        _tensor("beam_width", np.array([[1]], dtype=np.int32)),
        _tensor("temperature", np.array([[1.0]], dtype=np.float32)),
        _tensor("streaming", np.array([[streaming]], dtype=bool)),
        _tensor("end_id", np.array([[2]], dtype=np.int32)),
        _tensor("pad_id", np.array([[2]], dtype=np.int32)),
        _tensor("runtime_top_k", np.array([[1]], dtype=np.int32)),
        _tensor("runtime_top_p", np.array([[0.0]], dtype=np.float32)),
    ]


def _ibl_stop_inputs() -> list:
    """prepare_stop_signals(): input_ids is np.empty (any value), input_lengths and request_output_len 0."""
    return [
        _tensor("input_ids", np.empty([1, 1], dtype=np.int32)),
        _tensor("input_lengths", np.zeros([1, 1], dtype=np.int32)),
        _tensor("request_output_len", np.array([[0]], dtype=np.int32)),
        _tensor("stop", np.array([[True]], dtype="bool")),
    ]


def test_inflight_batcher_llm_client_streaming_stop_request(layout_server):
    """inflight_batcher_llm_client.py --streaming --request-output-len 200 --stop-after-ms N --request-id 7
    (TensorRT-LLM triton_backend 000a01d): the stop request goes on the same stream with the same
    id and parameters {'Streaming': True}. The script raises on any error that is not CANCELLED,
    appends output_ids[0][0] of every response whose sequence_length[0][0] > 0, and asserts fewer
    tokens than requested; a response without output_ids is the stop's ("Got cancellation response")."""
    output_len = 200
    got = _collect(
        layout_server,
        "tensorrt_llm",
        [(_ibl_inputs(output_len, True), "7", None)],
        stop_after_first=(_ibl_stop_inputs(), "7", {"Streaming": True}),
    )
    tokens = []
    for result in got:
        if isinstance(result, InferenceServerException):
            assert result.status() == "StatusCode.CANCELLED", result  # the script raises on anything else
            continue
        if result.as_numpy("output_ids") is not None and result.as_numpy("sequence_length")[0][0] > 0:
            tokens += list(result.as_numpy("output_ids")[0][0])
    assert 0 < len(tokens) < output_len


def test_inflight_batcher_llm_client_unary_stop_request(layout_server):
    """The same script without --streaming, against the unary twin (--model-name tensorrt_llm_unary):
    async_infer of the request, then of the stop request, both with parameters {'Streaming': False};
    it raises on an error. The stopped request answers the tokens so far, the stop request an empty
    OK response (no output_ids). The script sleeps --stop-after-ms before its one stop; here stops
    follow each other until the request has answered, so the test does not depend on timing."""
    client = grpcclient.InferenceServerClient(layout_server.grpc)
    main: queue.Queue = queue.Queue()
    stops: queue.Queue = queue.Queue()
    client.async_infer(
        "tensorrt_llm_unary",
        _ibl_inputs(200, False),
        callback=lambda result, error: main.put(error or result),
        request_id="8",
        parameters={"Streaming": False},
    )
    sent = 0
    while main.empty():
        client.async_infer(
            "tensorrt_llm_unary",
            _ibl_stop_inputs(),
            callback=lambda result, error: stops.put(error or result),
            request_id="8",
            parameters={"Streaming": False},
        )
        sent += 1
        time.sleep(0.05)
    answer = main.get(timeout=120)
    assert not isinstance(answer, InferenceServerException), answer
    generated = list(answer.as_numpy("output_ids")[0][0])[len(PROMPT_IDS) :]
    assert len(generated) < 200
    for _ in range(sent):
        stop = stops.get(timeout=120)
        assert not isinstance(stop, InferenceServerException), stop
        assert stop.as_numpy("output_ids") is None  # "Got cancellation response from server"
    client.close()


def test_inflight_batcher_llm_client_stop_via_request_cancel(layout_server):
    """--streaming --stop-after-ms N --stop-via-request-cancel: stop_stream(cancel_requests=True); the
    script accepts CANCELLED errors and raises on others."""
    results: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(layout_server.grpc)
    client.start_stream(callback=lambda result, error: results.put(error if error else result))
    client.async_stream_infer("tensorrt_llm", _ibl_inputs(200, True), request_id="9")
    results.get(timeout=120)
    client.stop_stream(cancel_requests=True)
    while not results.empty():
        r = results.get()
        if isinstance(r, InferenceServerException):
            assert r.status() == "StatusCode.CANCELLED", r
    client.close()


# --- benchmark_core_model.py -i grpc --decoupled -> tensorrt_llm --------------------------------------


def test_benchmark_core_model_grpc_decoupled(layout_server):
    """benchmark_core_model.py -i grpc --decoupled token-norm-dist ... (TensorRT-LLM triton_backend
    0249976): input_ids, input_lengths, request_output_len, pad_id 0 and end_id 1 when no tokenizer,
    request ids "0", "1", ... on one stream; every response without error."""
    requests = []
    for i in range(4):
        inputs = [
            _tensor("input_ids", np.array([PROMPT_IDS[: 2 + i]], dtype=np.int32)),
            _tensor("input_lengths", np.array([[2 + i]], dtype=np.int32)),
            _tensor("request_output_len", np.ones_like([[1]]).astype(np.int32) * 8),
            _tensor("pad_id", np.ones_like([[1]]).astype(np.int32) * 0),
            _tensor("end_id", np.ones_like([[1]]).astype(np.int32) * 1),
        ]
        requests.append((inputs, str(i), None))
    got = _collect(layout_server, "tensorrt_llm", requests)
    assert got and not any(isinstance(r, InferenceServerException) for r in got)
    assert {r.get_response().id for r in got} == {"0", "1", "2", "3"}


# --- request bodies from upstream's docs on the HTTP generate endpoint --------------------------------


@pytest.mark.parametrize(
    "key, value, words",
    [
        ("random_seed", 42, "send 'seed'"),
        ("min_length", 4, "send 'min_tokens'"),
        ("length_penalty", 1.0, "beam search only"),
        ("num_return_sequences", 2, "one sequence per request"),
        ("tempreature", 0.5, "unknown request field"),
    ],
)
def test_unknown_or_old_generate_keys_are_400_naming_them(layout_server, key, value, words):
    """Triton's generate endpoint turns JSON keys that are not inputs into request parameters:
    preprocessing refuses every one, naming it (they used to be ignored in silence)."""
    r = generate(layout_server, {"text_input": "What is machine learning?", "max_tokens": 8, key: value})
    assert r.status_code == 400, r.text
    assert key in r.json()["error"] and words in r.json()["error"]


def test_temperature_alone_and_zero_top_k_top_p_are_greedy(layout_server):
    """TensorRT-LLM's sampling rule: top_k == 0 and top_p == 0 (both absent) is greedy."""
    body = {"text_input": "Once upon a time", "max_tokens": 24}
    greedy = generate(layout_server, body).json()["text_output"]
    assert generate(layout_server, {**body, "temperature": 1.0}).json()["text_output"] == greedy
    assert (
        generate(layout_server, {**body, "temperature": 1.0, "top_k": 0, "top_p": 0.0}).json()["text_output"] == greedy
    )
    sampled = {
        generate(layout_server, {**body, "temperature": 1.0, "top_p": 1.0, "seed": s}).json()["text_output"]
        for s in (1, 2, 3)
    }
    assert sampled != {greedy}, "with a top_p the request samples"


def test_the_request_id_key_is_not_a_parameter(layout_server):
    """ "id" is the generate endpoint's request id (cancel-by-id uses it), not a request parameter."""
    r = generate(layout_server, {"text_input": "What is machine learning?", "max_tokens": 4, "id": "req-1"})
    assert r.status_code == 200, r.text


def test_the_unary_twin_refuses_unknown_generate_keys_too(layout_server):
    r = generate(
        layout_server,
        {"text_input": "What is machine learning?", "max_tokens": 4, "random_seed": 1},
        model="ensemble_unary",
    )
    assert r.status_code == 400 and "random_seed" in r.json()["error"], r.text
    ok = generate(
        layout_server, {"text_input": "What is machine learning?", "max_tokens": 4, "id": "u-1"}, model="ensemble_unary"
    )
    assert ok.status_code == 200, ok.text


# --- end_to_end_test.py -> preprocessing, tensorrt_llm, postprocessing, ensemble ----------------------


def _tensor_of(client_module, name: str, arr: np.ndarray):
    """end_to_end_test.py's utils.prepare_tensor, for its protocol (HTTP by default, or -i grpc)."""
    t = client_module.InferInput(name, list(arr.shape), np_to_triton_dtype(arr.dtype))
    t.set_data_from_numpy(arr)
    return t


def _end_to_end_test(client_module, url: str, engine: str, ensemble: str, return_log_probs: bool = False) -> None:
    """end_to_end_test.py -i {http,grpc} --max-input-len 128 --dataset ... [--return-log-probs] (TensorRT-LLM
    triton_backend 89fd9b7): test_functionality_ifb (the three models by hand under upstream's tensor
    names, then the ensemble, `assert output0 == ensemble_output`, and the log probs equal), then
    test_performance (concurrent async_infer on the ensemble, every result read)."""
    client = client_module.InferenceServerClient(url)
    T = lambda name, arr: _tensor_of(client_module, name, arr)  # noqa: E731
    dataset = [("Summarize: the cat sat on the mat.", 12), ("Translate: bonjour", 9)]
    for i, (prompt, output_len) in enumerate(dataset):
        input0 = [[prompt]]
        output0_len = np.ones_like(input0).astype(np.int32) * output_len
        result = client.infer(
            "preprocessing",
            [
                T("QUERY", np.array(input0).astype(object)),
                T("BAD_WORDS_DICT", np.array([[""]], dtype=object)),
                T("STOP_WORDS_DICT", np.array([[""]], dtype=object)),
                T("REQUEST_OUTPUT_LEN", output0_len),
            ],
            request_id=str(i),
        )
        names = ("INPUT_ID", "REQUEST_INPUT_LEN", "REQUEST_OUTPUT_LEN", "DECODER_INPUT_ID", "OUT_END_ID", "OUT_PAD_ID")
        ids, in_len, out_len, decoder_ids, end_id, pad_id = (result.as_numpy(n) for n in names)
        assert all(a is not None for a in (ids, in_len, out_len, decoder_ids, end_id, pad_id))
        inputs = [
            T("input_ids", ids),
            T("decoder_input_ids", decoder_ids),
            T("input_lengths", in_len),
            T("request_output_len", out_len),
            T("end_id", end_id),
            T("pad_id", pad_id),
        ]
        if return_log_probs:
            inputs.append(T("return_log_probs", np.array([[True]], dtype=bool)))
        result = client.infer(engine, inputs, request_id=str(i))
        output_ids = result.as_numpy("output_ids").astype(np.int32)
        seq_lengths = result.as_numpy("sequence_length")
        if return_log_probs:
            cum_log_probs = result.as_numpy("cum_log_probs").astype(np.float32)
            output_log_probs = result.as_numpy("output_log_probs").astype(np.float32)
        result = client.infer(
            "postprocessing",
            [T("TOKENS_BATCH", output_ids), T("SEQUENCE_LENGTH", seq_lengths)],
            request_id=str(i),
        )
        output0 = result.as_numpy("OUTPUT")
        inputs = [
            T("text_input", np.array(input0).astype(object)),
            T("max_tokens", output0_len),
            T("bad_words", np.array([[""]], dtype=object)),
            T("stop_words", np.array([[""]], dtype=object)),
        ]
        outputs = [client_module.InferRequestedOutput("text_output")]  # utils.prepare_outputs
        if return_log_probs:
            inputs.append(T("return_log_probs", np.array([[True]], dtype=bool)))
            outputs += [
                client_module.InferRequestedOutput("cum_log_probs"),
                client_module.InferRequestedOutput("output_log_probs"),
            ]
        result = client.infer(ensemble, inputs, outputs=outputs, request_id=str(i))
        ensemble_output = result.as_numpy("text_output")
        assert output0 == ensemble_output
        if return_log_probs:
            assert cum_log_probs == result.as_numpy("cum_log_probs")
            assert (output_log_probs == result.as_numpy("output_log_probs")).all()

    # test_performance: warm-up infers, then every prompt at once with async_infer.
    def create_inputs(prompt, output_len):
        input0 = [[prompt]]
        return [
            T("text_input", np.array(input0).astype(object)),
            T("max_tokens", np.ones_like(input0).astype(np.int32) * output_len),
            T("bad_words", np.array([[""]], dtype=object)),
            T("stop_words", np.array([[""]], dtype=object)),
        ]

    outputs = [client_module.InferRequestedOutput("text_output")]
    client.infer(ensemble, create_inputs(*dataset[0]), outputs=outputs, request_id="0")
    if client_module is httpclient:
        pending = [
            client.async_infer(ensemble, create_inputs(p, n), outputs=outputs, request_id=str(i))
            for i, (p, n) in enumerate(dataset)
        ]
        results = [r.get_result() for r in pending]  # utils.get_http_results
    else:
        done: queue.Queue = queue.Queue()
        for i, (p, n) in enumerate(dataset):
            client.async_infer(
                ensemble,
                create_inputs(p, n),
                outputs=outputs,
                callback=lambda result, error: done.put((result, error)),
                request_id=str(i),
            )
        results = []
        for _ in dataset:  # utils.get_grpc_results: raises on an error
            result, error = done.get(timeout=120)
            assert error is None, error
            results.append(result)
    assert all(r.as_numpy("text_output")[0] for r in results)
    client.close()


def test_end_to_end_test_functionality(layout_server):
    """end_to_end_test.py against the default (streaming) deployment: `tensorrt_llm` and `ensemble` are
    decoupled here, so its unary calls on them go to the twins `tensorrt_llm_unary` and `ensemble_unary`
    (the only change; the test below runs it unchanged on a serving.streaming: false deployment)."""
    _end_to_end_test(httpclient, layout_server.http, "tensorrt_llm_unary", "ensemble_unary", return_log_probs=True)


@pytest.fixture(scope="module", params=["torch", "tensorrtllm"])
def unary_server(request, tmp_path_factory):
    """serving.streaming: false (upstream's decoupled_mode: false): tensorrt_llm and the ensemble answer
    unary infer themselves."""
    layout = request.param
    work = tmp_path_factory.mktemp(f"unary-{layout}")
    spec = yaml.safe_load((ROOT / ("specs/tiny.yaml" if layout == "torch" else "specs/tiny-trtllm.yaml")).read_text())
    spec["name"] = f"unary-{layout}"
    spec["serving"] = {**spec.get("serving", {}), "streaming": False}
    path = work / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec))
    server = start_server(path, work, standin=layout == "tensorrtllm")
    yield server
    stop(server)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_end_to_end_test_unchanged_on_a_unary_deployment(unary_server, protocol):
    """end_to_end_test.py exactly as it is (unary infer on `tensorrt_llm` and `ensemble`), HTTP and gRPC."""
    if protocol == "http":
        _end_to_end_test(httpclient, unary_server.http, "tensorrt_llm", "ensemble", return_log_probs=True)
    else:
        _end_to_end_test(grpcclient, unary_server.grpc, "tensorrt_llm", "ensemble", return_log_probs=True)


# --- stop words as upstream matches them ---------------------------------------------------------------


def _stop_word_at(ids: list[int], tok) -> int:
    """A position k whose token, decoded and tokenized alone, is that token again and appears nowhere
    before k: a stop word that must end the output exactly at ids[: k + 1]."""
    for k in range(2, len(ids)):
        word = tok.decode([ids[k]])
        if word.strip() and tok.encode(word, add_special_tokens=False).ids == [ids[k]] and ids[k] not in ids[:k]:
            return k
    pytest.fail(f"no token of {ids} round-trips alone")


@pytest.mark.parametrize("streaming", [False, True], ids=["unary", "streaming"])
def test_stop_words_match_token_sequences_and_stay_in_the_output(layout_server, streaming):
    """Upstream's preprocessing tokenizes each stop word alone and TensorRT-LLM ends the generation when
    its tokens end with one word's ids, keeping them in the output (the default here; the word inside
    a longer token does not stop). stop_words_match "text" cuts at the text instead."""
    tok = load_fast(ROOT / "build/checkpoints/tiny-random-llama")
    # Seeded sampling: varied tokens (the tiny model's greedy answer repeats one), the same ones each time.
    body = {
        "text_input": "Write anything.",
        "max_tokens": 32,
        "min_tokens": 32,
        "temperature": 1.0,
        "top_p": 1.0,
        "seed": 7,
    }
    full = generate(layout_server, body).json()
    ids = full["output_token_ids"]
    k = _stop_word_at(ids, tok)
    word = tok.decode([ids[k]])
    stopped = {**body, "stop_words": [word]}
    if streaming:
        events = generate_stream(layout_server, stopped)
        text = "".join(e["text_output"] for e in events)
        # Triton's JSON writes a one-element tensor as a number.
        got = [t for e in events for t in np.atleast_1d(e["output_token_ids"]).tolist()]
    else:
        r = generate(layout_server, stopped)
        assert r.status_code == 200, r.text
        text, got = r.json()["text_output"], r.json()["output_token_ids"]
    assert got == ids[: k + 1], (word, ids, got)
    assert text.endswith(word) and full["text_output"].startswith(text)
    as_text = generate(layout_server, {**stopped, "stop_words_match": "text"}).json()["text_output"]
    assert word not in as_text and full["text_output"].startswith(as_text)
    bad = generate(layout_server, {**stopped, "stop_words_match": "substring"})
    assert bad.status_code == 400 and "stop_words_match" in bad.json()["error"], bad.text


@pytest.mark.parametrize("streaming", [False, True], ids=["unary", "streaming"])
def test_exclude_input_in_output_false_echoes_the_prompt_as_sent(layout_server, streaming):
    """The chat template applies (the spec's default), yet the echo is the client's text_input, as
    upstream (no template) answers: the prompt as sent, then the same generated text."""
    prompt = "Born in north-east France, Soyer trained as a"
    body = {"text_input": prompt, "max_tokens": 12}
    if streaming:
        generated = "".join(e["text_output"] for e in generate_stream(layout_server, body))
        echoed = "".join(
            e["text_output"] for e in generate_stream(layout_server, {**body, "exclude_input_in_output": False})
        )
    else:
        generated = generate(layout_server, body).json()["text_output"]
        echoed = generate(layout_server, {**body, "exclude_input_in_output": False}).json()["text_output"]
    assert echoed == prompt + generated, (echoed, generated)


# --- batch > 1 and num_return_sequences: refused by name ----------------------------------------------


def test_batches_and_several_sequences_are_refused_naming_the_input(layout_server):
    """end_to_end_grpc_client.py --batch-inputs (two prompts in one request), -n 2 (num_return_sequences)
    and a client asking for batch_index / sequence_index, and a token-level request of two sequences:
    each is INVALID_ARGUMENT naming the input (one prompt and one sequence per request here; upstream
    serves them)."""
    client = grpcclient.InferenceServerClient(layout_server.grpc)
    two = [
        _tensor("text_input", np.array([["What is machine learning?"], ["Who are you?"]]).astype(object)),
        _tensor("max_tokens", np.array([[8], [8]], dtype=np.int32)),
    ]
    one = _e2e_grpc_inputs("What is machine learning?", 8)
    n2 = one + [_tensor("num_return_sequences", np.array([[2]], dtype=np.int32))]
    tokens2 = [
        _tensor("input_ids", np.array([PROMPT_IDS, PROMPT_IDS], dtype=np.int32)),
        _tensor("input_lengths", np.array([[len(PROMPT_IDS)]] * 2, dtype=np.int32)),
        _tensor("request_output_len", np.array([[8]] * 2, dtype=np.int32)),
    ]
    cases = [
        ("ensemble_unary", two, None, "text_input"),
        ("ensemble_unary", n2, None, "num_return_sequences"),
        ("ensemble_unary", one, [grpcclient.InferRequestedOutput("batch_index")], "batch_index"),
        ("ensemble_unary", one, [grpcclient.InferRequestedOutput("sequence_index")], "sequence_index"),
        ("tensorrt_llm_unary", tokens2, None, "input_ids"),
    ]
    for model, inputs, outputs, name in cases:
        with pytest.raises(InferenceServerException) as info:
            client.infer(model, inputs, outputs=outputs)
        assert info.value.status() == "StatusCode.INVALID_ARGUMENT", (name, info.value)
        assert name in info.value.message(), (name, info.value)
    client.close()
