"""Megatron-LM: launch scripts and argument files read (`reader`, `recipe`), flags written
(`writer`)."""
