"""torchtitan: TOML job configs read (`reader`) and written (`writer`); model flavors
(`flavors`)."""
