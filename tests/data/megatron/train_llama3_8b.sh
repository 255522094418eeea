#!/bin/bash
# Megatron-LM Llama-3 8B pretraining (examples/llama style)
GPUS_PER_NODE=8
NNODES=4
WORLD_SIZE=$(($GPUS_PER_NODE*$NNODES))
CHECKPOINT_PATH=/ckpt/llama3
DATA_PATH=/data/my_text_document
TP=2
PP=2

DISTRIBUTED_ARGS=(
    --nproc_per_node $GPUS_PER_NODE
    --nnodes $NNODES
    --master_addr localhost
    --master_port 6000
)

MODEL_ARGS=(
    --num-layers 32
    --hidden-size 4096
    --ffn-hidden-size 14336
    --num-attention-heads 32
    --group-query-attention
    --num-query-groups 8
    --seq-length 8192
    --max-position-embeddings 8192
    --position-embedding-type rope
    --normalization RMSNorm
    --swiglu
    --untie-embeddings-and-output-weights
    --disable-bias-linear
    --vocab-size 128256   # tokenizer vocabulary
)

TRAINING_ARGS="--micro-batch-size 1 --global-batch-size 128 --train-iters 1000 \
    --lr 3e-4 --min-lr 3e-5 --lr-decay-style cosine --weight-decay 0.1 --clip-grad 1.0 --bf16 \
    --use-flash-attn --recompute-activations --use-distributed-optimizer --overlap-grad-reduce"

PARALLEL_ARGS=(
    --tensor-model-parallel-size ${TP}
    --pipeline-model-parallel-size ${PP}
    --num-layers-per-virtual-pipeline-stage 8
    --sequence-parallel
)

torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py \
    ${MODEL_ARGS[@]} \
    $TRAINING_ARGS \
    ${PARALLEL_ARGS[@]} \
    --data-path $DATA_PATH --split 949,50,1 \
    --save $CHECKPOINT_PATH --load $CHECKPOINT_PATH \
    --log-interval 10 --eval-interval 1000 --eval-iters 10 --tensorboard-dir /tb \
    --transformer-impl transformer_engine --moe-token-dispatcher-type alltoall
