#!/bin/bash
# fills a ds_config from a template that is not shipped beside this script
GBS=64
MBS=2
DS_CONFIG=ds_config_gbs${GBS}.json
sed "s/CONFIG_BATCH_SIZE/${GBS}/" ds_config_gpt_TEMPLATE.json \
    | sed "s/CONFIG_MBSIZE/${MBS}/" > ${DS_CONFIG}
torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 12 --hidden-size 768 \
    --num-attention-heads 12 --seq-length 2048 --max-position-embeddings 2048 \
    --micro-batch-size $MBS --global-batch-size $GBS --vocab-size 50304 \
    --deepspeed --deepspeed_config ${DS_CONFIG}
