"""The policy-gradient trainer of bench/learn_real.py: a long-lived process with the vLLM venv's torch (torch
never enters the farm's install), holding the model's float32 weights and its optimizer across steps.

    <vllm-venv>/bin/python ops/real_vllm/train_step.py MODEL_DIR --lr 2e-5

One JSON line per step on stdin: {"batch": FILE, "out": DIR}. FILE holds the farm's trajectories, a JSON list
of {"prompt_ids", "response_ids", "response_logprobs", "loss_mask", "advantage"}; the step takes the
loss-mask-1 tokens' log-probabilities under the current weights, one Adam step on -advantage * their sum
(per trajectory, averaged; tokens structured outputs forced are left out: `step`), and writes the new
weights (bf16 safetensors, the model directory's other files beside) to DIR for the server to load. It
answers one JSON line: the loss, the tokens the model chose and those forced, and the seconds. The
embeddings (tied with the output layer: 170M of the 270M parameters) stay frozen; the 18 transformer layers
train.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any


def token_logprobs(model: Any, item: dict[str, Any]) -> tuple[Any, list[int]]:
    """Log-probabilities of the trajectory's response ids under `model`, and the loss mask."""
    import torch

    prompt, response = item["prompt_ids"], item["response_ids"]
    ids = torch.tensor([prompt + response])
    logits = model(input_ids=ids, logits_to_keep=len(response) + 1).logits[0, :-1].float()
    picked = torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(response).unsqueeze(1)).squeeze(1)
    return picked, list(item["loss_mask"])


def step(model: Any, optimizer: Any, batch: list[dict[str, Any]]) -> dict[str, float]:
    """One Adam step on -advantage * the sum of the log-probabilities of the tokens the model chose. A token
    the server reports at log-probability 0 was forced (structured outputs allowed nothing else): the
    sampler had no choice there, so it carries no gradient. (The server's logprobs are those of the
    constrained distribution; the trainer's are the model's own, over the whole vocabulary.)"""
    import torch

    optimizer.zero_grad()
    loss_total, free, forced = 0.0, 0, 0
    for item in batch:
        logprobs, mask = token_logprobs(model, item)
        chose = [m and lp != 0.0 for m, lp in zip(mask, item["response_logprobs"], strict=True)]
        free += sum(chose)
        forced += sum(mask) - sum(chose)
        if item["advantage"] == 0 or not any(chose):
            continue  # no gradient: its group's rewards were all equal
        weights = torch.tensor(chose, dtype=torch.float32)
        loss = -item["advantage"] * (logprobs * weights).sum() / len(batch)
        loss.backward()
        loss_total += float(loss)
    optimizer.step()
    return {"loss": loss_total, "free_tokens": free, "forced_tokens": forced}


def save(model: Any, source: Path, out: Path, keys: list[str]) -> None:
    import torch
    from safetensors.torch import save_file

    state = model.state_dict()
    out.mkdir(parents=True, exist_ok=True)
    tensors = {k: state[k].detach().to(torch.bfloat16).contiguous() for k in keys}
    save_file(tensors, out / "model.safetensors", metadata={"format": "pt"})
    for item in source.iterdir():
        if item.is_file() and item.name != "model.safetensors":
            shutil.copy(item, out / item.name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    import torch
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(str(args.model), dtype=torch.float32)
    model.train()
    with safe_open(str(args.model / "model.safetensors"), "pt") as f:
        keys = list(f.keys())
    trained = [
        p for name, p in model.named_parameters() if "embed_tokens" not in name and "lm_head" not in name
    ]
    for name, p in model.named_parameters():
        p.requires_grad_("embed_tokens" not in name and "lm_head" not in name)
    optimizer = torch.optim.Adam(trained, lr=args.lr)
    print(json.dumps({"ready": True, "trained_parameters": sum(p.numel() for p in trained)}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        started = time.monotonic()
        result = step(model, optimizer, json.loads(Path(request["batch"]).read_text()))
        save(model, args.model, Path(request["out"]), keys)
        print(json.dumps({**result, "seconds": round(time.monotonic() - started, 1)}), flush=True)


if __name__ == "__main__":
    main()
