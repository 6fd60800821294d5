"""General readers with no planner knowledge: a bash reader (`bash`) and OmegaConf
interpolation (`omegaconf`). They import only `planner.errors` and `planner.io`."""
