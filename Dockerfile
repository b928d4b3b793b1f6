# The service image: the package with its runtime dependencies only (no dev extras), run as an
# unprivileged user. One image for every process role: `dream serve` (the default command),
# `dream worker` and `dream project`; see compose.yaml. The dependencies are exactly those of
# requirements.lock, checked against its hashes; the wheels built here are installed without
# dependencies. `make pin-images` pins the base images by digest (docs/deployment.md).
#
#   docker build -t artifact-dreaming .
#   docker run -p 8787:8787 -v dream-data:/data artifact-dreaming

# Build the wheel in a throwaway stage, so no source tree ends up in the image. The benchmarks,
# devkit and the tests are tools beside the product: not in the wheel, not copied here.
FROM python:3.11-slim AS build
WORKDIR /src
# The Python client is its own distribution the project depends on by name: its wheel first.
COPY clients/python ./clients/python
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels ./clients/python
COPY pyproject.toml README.md ./
COPY domain ./domain
COPY application ./application
COPY projections ./projections
COPY adapters ./adapters
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY requirements.lock /tmp/requirements.lock
RUN pip install --no-cache-dir --require-hashes --requirement /tmp/requirements.lock \
    && rm /tmp/requirements.lock
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-deps /wheels/*.whl \
    && rm -rf /wheels \
    && groupadd --system --gid 10001 dream \
    && useradd --system --uid 10001 --gid dream --home-dir /home/dream --create-home \
       --shell /usr/sbin/nologin dream \
    && install --directory --owner dream --group dream --mode 0700 /data

# The embedded store (SQLite) and the bootstrap admin-token file live here: mount a volume.
ENV DREAM_DATA_DIR=/data
WORKDIR /home/dream
USER dream:dream

EXPOSE 8787
# No curl in the slim image: Python's urllib asks /healthz (503 while degraded fails it too).
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8787/healthz', timeout=4)"]

CMD ["dream", "serve", "--host", "0.0.0.0", "--port", "8787"]
