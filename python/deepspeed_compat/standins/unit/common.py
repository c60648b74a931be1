"""tests/unit/common.py's DistributedTest, for world_size 1 on one CPU process: the test methods
run in the pytest process itself (DeepSpeed forks a process group around them)."""


class DistributedTest:
    world_size = 1
    reuse_dist_env = False
    requires_cuda_env = True
    init_distributed = True
    set_dist_env = True
