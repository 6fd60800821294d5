#!/usr/bin/env bash
# Our own fixture in the shape of TensorRT-LLM's "Quick Start Recipe for DeepSeek R1"
# (docs/source/deployment-guide): the extra LLM API options written with `cat << EOF > ${FILE}`,
# attention data parallel, an FP8 KV cache and MTP, on 8 GPUs (TP 8, EP 8).
EXTRA_LLM_API_FILE=/tmp/config.yml

cat << EOF > ${EXTRA_LLM_API_FILE}
enable_attention_dp: true
kv_cache_config:
  dtype: fp8
speculative_config:
  decoding_type: MTP
  num_nextn_predict_layers: 1
EOF

trtllm-serve deepseek-ai/DeepSeek-R1-0528 \
  --host 0.0.0.0 \
  --port 8000 \
  --backend pytorch \
  --max_batch_size 256 \
  --max_num_tokens 4096 \
  --kv_cache_free_gpu_memory_fraction 0.8 \
  --tp_size 8 \
  --ep_size 8 \
  --trust_remote_code \
  --extra_llm_api_options ${EXTRA_LLM_API_FILE}
