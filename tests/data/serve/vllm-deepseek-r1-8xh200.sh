#!/usr/bin/env bash
# Our own fixture in the shape of the vLLM recipe "DeepSeek-V3 (R1) usage guide"
# (vllm-project/recipes DeepSeek/DeepSeek-V3.md: FP8 on 8xH200, TP + EP). The checkpoint
# ships FP8 weights; the command line does not say the request shape (give --isl/--osl).
set -euo pipefail

vllm serve deepseek-ai/DeepSeek-R1-0528 \
  --trust-remote-code \
  --tensor-parallel-size 8 \
  --enable-expert-parallel
