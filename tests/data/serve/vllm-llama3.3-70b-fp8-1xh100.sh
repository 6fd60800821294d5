#!/usr/bin/env bash
# Our own fixture in the shape of the vLLM command of NVIDIA's ModelOpt FP8 checkpoint
# (huggingface.co/nvidia/Llama-3.3-70B-Instruct-FP8 model card: vLLM with quantization
# modelopt), on one 80 GB H100: 68 GiB of weights leave room for a few GiB of FP8 KV
# cache only with most of the GPU given to vLLM and a short context.
vllm serve nvidia/Llama-3.3-70B-Instruct-FP8 \
  --max-model-len 8192 \
  --kv-cache-dtype fp8 \
  --gpu-memory-utilization 0.95 \
  --tensor-parallel-size 1
