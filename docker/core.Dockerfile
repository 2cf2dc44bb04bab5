# bridge core image: the ONNX stage, onnxruntime validation and the CLI, no deep-learning framework.
# Build from the repository root:  docker build -f docker/core.Dockerfile -t bridge:core .
FROM python:3.11-slim
WORKDIR /opt/bridge
COPY pyproject.toml constraints.txt README.md ./
COPY bridge ./bridge
COPY adapters ./adapters
COPY opsets ./opsets
RUN pip install --no-cache-dir -c constraints.txt . && bridge --help >/dev/null
ENTRYPOINT ["bridge"]
