#!/bin/bash
# Llama 3 70B pre-training with Megatron-LM on 128 DGX H100 nodes (1024 GPUs): the NeMo
# launcher's llama3_70b layout (TP4 PP4 VP5 CP2, DP 32), MBS 1, GBS 2048, seq 8192,
# sequence parallelism and the distributed optimizer, no activation recompute.
set -euo pipefail

export CUDA_DEVICE_MAX_CONNECTIONS=1

GPUS_PER_NODE=${GPUS_PER_NODE:-8}
NNODES=${SLURM_NNODES:-128}
NODE_RANK=${SLURM_NODEID:-0}
MASTER_ADDR=${MASTER_ADDR:-localhost}
MASTER_PORT=${MASTER_PORT:-6000}

CHECKPOINT_PATH=${1:-/checkpoints/llama3-70b}
TOKENIZER_MODEL=${TOKENIZER_MODEL:-meta-llama/Meta-Llama-3-70B}
DATA_PATH=${DATA_PATH:-/data/redpajama/llama3_text_document}

TP=${TP:-4}
PP=${PP:-4}
CP=${CP:-2}
SEQ_LENGTH=8192

DISTRIBUTED_ARGS=(
    --nproc_per_node $GPUS_PER_NODE
    --nnodes $NNODES
    --node_rank $NODE_RANK
    --master_addr $MASTER_ADDR
    --master_port $MASTER_PORT
)

MODEL_ARGS=(
    --use-mcore-models
    --num-layers 80
    --hidden-size 8192
    --ffn-hidden-size 28672
    --num-attention-heads 64
    --group-query-attention
    --num-query-groups 8
    --seq-length $SEQ_LENGTH
    --max-position-embeddings $SEQ_LENGTH
    --position-embedding-type rope
    --rotary-base 500000
    --swiglu
    --normalization RMSNorm
    --norm-epsilon 1e-5
    --disable-bias-linear
    --untie-embeddings-and-output-weights
    --attention-dropout 0.0
    --hidden-dropout 0.0
)

TRAINING_ARGS=(
    --micro-batch-size 1
    --global-batch-size 2048
    --train-iters 300000
    --lr 1.5e-4 --min-lr 1.0e-5 --lr-decay-style cosine --lr-warmup-iters 107
    --weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.95 --clip-grad 1.0
    --init-method-std 0.008944
    --bf16
    --use-distributed-optimizer
    --overlap-grad-reduce
    --overlap-param-gather
)

MODEL_PARALLEL_ARGS=(
    --tensor-model-parallel-size $TP
    --pipeline-model-parallel-size $PP
    --num-layers-per-virtual-pipeline-stage 4   # 80 / 4 ranks = 20 layers = 5 chunks of 4
    --context-parallel-size $CP
    --sequence-parallel
    --tp-comm-overlap
)

DATA_ARGS=(
    --data-path $DATA_PATH
    --tokenizer-type HuggingFaceTokenizer
    --tokenizer-model $TOKENIZER_MODEL
    --split 99990,8,2
)

EVAL_AND_LOGGING_ARGS=(
    --log-interval 10
    --save-interval 2000
    --eval-interval 2000
    --eval-iters 32
    --save $CHECKPOINT_PATH
    --load $CHECKPOINT_PATH
    --tensorboard-dir "${CHECKPOINT_PATH}/tensorboard"
)

torchrun "${DISTRIBUTED_ARGS[@]}" pretrain_gpt.py \
    "${MODEL_ARGS[@]}" \
    "${TRAINING_ARGS[@]}" \
    "${MODEL_PARALLEL_ARGS[@]}" \
    "${DATA_ARGS[@]}" \
    "${EVAL_AND_LOGGING_ARGS[@]}" 2>&1 | tee "train_${NODE_RANK}.log"
