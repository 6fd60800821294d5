# A torchtitan config registry in the shape of torchtitan's models/<name>/config_registry.py,
# written for planner's tests. planner reads it with ast; it is never imported or run.
from torchtitan.config import (
    ActivationCheckpointConfig,
    ParallelismConfig,
    TrainingConfig,
)
from torchtitan.trainer import Trainer

from . import model_registry

STEPS = 1000


def llama3_8b_fsdp() -> Trainer.Config:
    return Trainer.Config(
        model_spec=model_registry("8B"),
        training=TrainingConfig(
            local_batch_size=2, global_batch_size=-1, seq_len=8192, steps=STEPS
        ),
        parallelism=ParallelismConfig(data_parallel_shard_degree=-1, tensor_parallel_degree=1),
        activation_checkpoint=ActivationCheckpointConfig(mode="full"),
    )


def llama3_70b_tp8_pp2() -> Trainer.Config:
    return Trainer.Config(
        model_spec=model_registry("70B"),
        training=TrainingConfig(local_batch_size=4, seq_len=8192),
        parallelism=ParallelismConfig(
            data_parallel_shard_degree=-1,
            tensor_parallel_degree=8,
            pipeline_parallel_degree=2,
            pipeline_parallel_microbatch_size=1,
            pipeline_parallel_schedule="1F1B",
        ),
        activation_checkpoint=ActivationCheckpointConfig(
            mode="selective", selective_ac_option="op"
        ),
        compile={"enable": True, "components": ["model", "loss"]},
    )
