#!/bin/bash
# The NeMo 2 llama3_70b recipe's default layout (TP4 PP4 VP5 CP2) on a single node of 8 GPUs:
# Megatron-LM rejects it, world size 8 is not divisible by TP*PP*CP = 32.
export CUDA_DEVICE_MAX_CONNECTIONS=1
torchrun --nproc_per_node 8 pretrain_gpt.py \
    --num-layers 80 --hidden-size 8192 --ffn-hidden-size 28672 \
    --num-attention-heads 64 --group-query-attention --num-query-groups 8 \
    --seq-length 8192 --max-position-embeddings 8192 \
    --swiglu --normalization RMSNorm --position-embedding-type rope \
    --disable-bias-linear --untie-embeddings-and-output-weights \
    --tokenizer-type HuggingFaceTokenizer --tokenizer-model meta-llama/Meta-Llama-3-70B \
    --tensor-model-parallel-size 4 --pipeline-model-parallel-size 4 \
    --num-virtual-stages-per-pipeline-rank 5 --context-parallel-size 2 --sequence-parallel \
    --micro-batch-size 1 --global-batch-size 512 --bf16 --use-distributed-optimizer \
    --mock-data
