#!/usr/bin/env bash
# Our own fixture in the shape of SGLang's DeepSeek usage page (docs/basic_usage/deepseek.md,
# "Multi-token Prediction"): EAGLE speculative decoding with the model's own MTP layer, one
# 8-GPU node, TP 8.
python3 -m sglang.launch_server \
  --model-path deepseek-ai/DeepSeek-V3-0324 \
  --speculative-algorithm EAGLE \
  --speculative-num-steps 1 \
  --speculative-eagle-topk 1 \
  --speculative-num-draft-tokens 2 \
  --trust-remote-code \
  --tp 8
