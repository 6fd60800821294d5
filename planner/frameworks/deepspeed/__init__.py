"""DeepSpeed: ds_config.json and Megatron-DeepSpeed launch scripts read (`reader`) and
written (`writer`)."""
