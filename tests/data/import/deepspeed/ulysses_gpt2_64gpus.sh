#!/bin/bash
# A Megatron-DeepSpeed launch in the shape of its long-sequence examples, written for planner's
# tests: a hostfile loop, a total GPU count of its own, Ulysses with FPDT, GPT-2 BPE files.
NUM_NODES=8
NUM_GPUS=64
SP=4
SEQ=16384
DS_CONFIG=ds_config_ulysses.json

rm -f hostfile
for (( node = 0; node < NUM_NODES; node++ )); do
    echo "worker-${node} slots=8" >> hostfile
done

deepspeed --hostfile hostfile pretrain_gpt.py \
    --num-layers 24 --hidden-size 2048 --num-attention-heads 16 \
    --seq-length $SEQ --max-position-embeddings $SEQ \
    --micro-batch-size 1 --global-batch-size 64 \
    --vocab-file data/gpt2-vocab.json --merge-file data/gpt2-merges.txt \
    --ds-sequence-parallel-size $SP --ds-sequence-parallel-fpdt \
    --ds-sequence-parallel-fpdt-offloading \
    --no-pipeline-parallel --bf16 --use-flash-attn-v2 \
    --deepspeed --deepspeed_config $DS_CONFIG --zero-stage 1
