#!/bin/bash
# The launch of NVIDIA Megatron-LM's examples/llama/train_llama3_8b_h100_fp8.sh, reconstructed
# for the tests (not a copy): the same shape -- positional defaults, flag arrays, the FP8 flags
# in an if on $DTYPE as quoted "--flag value" entries, the DDP array appended to the training
# array, a tokenizer if/else on ${3:-MOCK}, a check that the training script exists -- and every
# flag of the original that changes memory or step time. Left out: learning-rate schedule,
# logging, profiling and checkpoint flags. examples/llama3-8b-fp8-8xh100.yaml is the same job.
export CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-1}

TOKENIZER_ARG=${3:-"MOCK"}
DATA_ARG=${4:-"MOCK"}

GPUS_PER_NODE=8
NUM_NODES=1
TP_SIZE=1
CP_SIZE=1
MICRO_BATCH_SIZE=1
GLOBAL_BATCH_SIZE=128
NUM_LAYERS=32
DTYPE="fp8"
SEQ_LENGTH=8192
PRETRAIN_SCRIPT_PATH="pretrain_gpt.py"

DISTRIBUTED_ARGS=(--nproc_per_node $GPUS_PER_NODE --nnodes $NUM_NODES)

MODEL_ARGS=(
    --use-mcore-models
    --num-layers $NUM_LAYERS --hidden-size 4096 --ffn-hidden-size 14336
    --num-attention-heads 32 --group-query-attention --num-query-groups 8 --kv-channels 128
    --seq-length $SEQ_LENGTH --max-position-embeddings $SEQ_LENGTH
    --position-embedding-type rope --rotary-base 1000000 --rotary-percent 1.0
    --attention-dropout 0.0 --hidden-dropout 0.0
    --swiglu --normalization RMSNorm --attention-backend fused
    --untie-embeddings-and-output-weights --disable-bias-linear
)

TRAINING_ARGS=(
    --micro-batch-size $MICRO_BATCH_SIZE
    --global-batch-size $GLOBAL_BATCH_SIZE
    --bf16
    --grad-reduce-in-bf16
    --cross-entropy-loss-fusion
)

DTYPE_ARGS=()
if [[ "$DTYPE" == "fp8" ]]; then
    DTYPE_ARGS+=(
        "--fp8-format hybrid"
        "--fp8-amax-history-len 1024"
        "--fp8-amax-compute-algo max"
        "--fp8-param-gather"
    )
fi

MODEL_PARALLEL_ARGS=(
    --tensor-model-parallel-size $TP_SIZE
    --context-parallel-size $CP_SIZE
    --sequence-parallel
)

DDP_ARGS=(
    --use-distributed-optimizer
    --overlap-grad-reduce
    --overlap-param-gather
)
TRAINING_ARGS+=("${DDP_ARGS[@]}")

DATA_ARGS_LIST=()
if [[ "$TOKENIZER_ARG" == "MOCK" ]] || [[ "$DATA_ARG" == "MOCK" ]] || [[ -z "$TOKENIZER_ARG" ]]; then
    DATA_ARGS_LIST+=("--mock-data" "--tokenizer-type NullTokenizer" "--vocab-size 128256")
else
    DATA_ARGS_LIST+=("--data-path $DATA_ARG" "--tokenizer-type HuggingFaceTokenizer"
                     "--tokenizer-model $TOKENIZER_ARG" "--vocab-size 128256")
fi

if [ ! -f "$PRETRAIN_SCRIPT_PATH" ]; then
    echo "Error: pretrain_gpt.py not found at $PRETRAIN_SCRIPT_PATH"
    exit 1
fi

torchrun ${DISTRIBUTED_ARGS[@]} \
    "$PRETRAIN_SCRIPT_PATH" \
    ${MODEL_ARGS[@]} \
    ${TRAINING_ARGS[@]} \
    ${DTYPE_ARGS[@]} \
    ${MODEL_PARALLEL_ARGS[@]} \
    ${DATA_ARGS_LIST[@]}
