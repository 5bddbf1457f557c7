"""A second checkpoint of the built model, its MLP weights moved by seeded noise: what a trainer's next
version looks like to the server (same architecture, different weights). Run with the vLLM venv's python:

    <vllm-venv>/bin/python ops/real_vllm/perturb.py MODEL_DIR OUT_DIR [--seed N] [--scale S]
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--scale", type=float, default=0.02)
    args = parser.parse_args()
    import torch
    from safetensors.torch import load_file, save_file

    tensors = load_file(args.model / "model.safetensors")
    generator = torch.Generator().manual_seed(args.seed)
    for name, value in tensors.items():
        if ".mlp." in name and value.dim() == 2:
            noise = args.scale * torch.randn(value.shape, generator=generator)
            tensors[name] = (value.float() + noise).to(value.dtype)
    args.out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, args.out / "model.safetensors", metadata={"format": "pt"})
    for item in args.model.iterdir():
        if item.is_file() and item.name != "model.safetensors":
            shutil.copy(item, args.out / item.name)


if __name__ == "__main__":
    main()
