"""Serving engines (vLLM, SGLang, TensorRT-LLM): launch commands and the serving YAML read
(`reader`), launch commands written (`writer`)."""
