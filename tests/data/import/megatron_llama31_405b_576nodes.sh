#!/bin/bash
# Llama 3.1 405B pre-training with Megatron-LM on 576 DGX H100 nodes (4608 GPUs): the NeMo
# launcher's llama3_1_405b layout (TP8 PP9 VP7 CP2, DP 32), MBS 1, GBS 2016, seq 8192.
# 126 layers / 9 pipeline ranks = 14 per rank = 7 virtual chunks of 2 layers.
#SBATCH --nodes=576
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8

export CUDA_DEVICE_MAX_CONNECTIONS=1
: ${NNODES:=576}
: ${GPUS_PER_NODE:=8}
WORLD_SIZE=$((GPUS_PER_NODE * NNODES))

GPT_ARGS="
    --num-layers 126 \
    --hidden-size 16384 \
    --ffn-hidden-size 53248 \
    --num-attention-heads 128 \
    --group-query-attention --num-query-groups 8 \
    --seq-length 8192 --max-position-embeddings 8192 \
    --swiglu --normalization RMSNorm --position-embedding-type rope --rotary-base 500000 \
    --disable-bias-linear --untie-embeddings-and-output-weights \
    --tokenizer-type HuggingFaceTokenizer --tokenizer-model meta-llama/Llama-3.1-405B
"
PARALLEL_ARGS="--tensor-model-parallel-size 8 --pipeline-model-parallel-size 9 \
    --num-virtual-stages-per-pipeline-rank 7 --context-parallel-size 2 --sequence-parallel"
TRAIN_ARGS="--micro-batch-size 1 --global-batch-size 2016 --bf16 \
    --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather \
    --lr 8e-5 --min-lr 8e-7 --lr-decay-style cosine --train-iters 1000000 --mock-data"

srun --ntasks-per-node 1 \
    torchrun --nnodes "$NNODES" --nproc-per-node "$GPUS_PER_NODE" \
        --rdzv-backend c10d --rdzv-endpoint "${MASTER_ADDR:-$(hostname)}:29500" \
    pretrain_gpt.py $GPT_ARGS $PARALLEL_ARGS $TRAIN_ARGS
