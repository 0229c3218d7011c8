"""Experiments: plain functions (`run_*`) plus a `main(cfg, out_dir)` that unpacks Hydra config."""
