# A torchtitan JobConfig module in the older Python shape (default_config = JobConfig(...)),
# written for planner's tests; read with ast, never run.
from torchtitan.config import JobConfig, Model, Parallelism, Training

default_config = JobConfig(
    model=Model(name="llama3", flavor="8B", hf_assets_path="./assets/hf/Llama-3.1-8B"),
    training=Training(local_batch_size=1, seq_len=8192, steps=100),
    parallelism=Parallelism(data_parallel_shard_degree=4, tensor_parallel_degree=2),
)
