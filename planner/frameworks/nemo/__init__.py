"""NeMo 1 and NeMo 2 / Megatron-Bridge YAML read (`reader`, `bridge`, with the Megatron-Core
TransformerConfig keys in `mcore`), NeMo YAML written (`writer`)."""
