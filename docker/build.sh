#!/usr/bin/env bash
# Build the pinned bridge images and smoke-test each (bridge --help must work inside).
# Needs a running Docker engine (this project's development machines have only the client).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
for image in core; do
  docker build -f "docker/${image}.Dockerfile" -t "bridge:${image}" .
  docker run --rm "bridge:${image}" --help >/dev/null
  echo "bridge:${image} ok"
done
