# CUDA PyTorch image with cmpnn_dist installed (for `ray up`, KubeRay and SLURM/pyxis).
#   docker build -t cmpnn-dist:0.1.0 .
#   docker run --gpus all --shm-size=16g cmpnn-dist:0.1.0 python -m cmpnn_dist.train
# The base pins torch (2.5.1, CUDA 12.4, cuDNN 9, Python 3.11); Ray is pinned to the version
# the code is tested with.  Installed editable from /opt/cmpnn_dist so conf/ is found.
ARG BASE_IMAGE=pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime
FROM ${BASE_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/cmpnn_dist

# dependencies first (cached while only the code changes)
COPY pyproject.toml README.md ./
RUN mkdir cmpnn_dist && touch cmpnn_dist/__init__.py \
    && pip install --no-cache-dir "ray[default,train]==2.60.0" -e ".[gpu]" \
    && rm -rf cmpnn_dist

COPY cmpnn_dist ./cmpnn_dist
COPY conf ./conf
COPY launch ./launch
RUN pip install --no-cache-dir --no-deps -e . \
    && python -c "import cmpnn_dist.distributed, cmpnn_dist.train"

# default: the built-in demo run; clusters pass their own command (see launch/README.md)
CMD ["python", "-m", "cmpnn_dist.train"]
