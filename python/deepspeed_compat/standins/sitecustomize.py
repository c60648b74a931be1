"""Switches DeepSpeed to nvmeio_torch in every Python process started with this folder on
PYTHONPATH (ds_io's workers are spawned, not forked), unless DS_AIO_EXTENSION asks for
DeepSpeed's own handle. This is the one line a user adds: nvmeio_torch.use_in_deepspeed()."""

import os

if not os.environ.get("DS_AIO_EXTENSION"):
    import nvmeio_torch

    nvmeio_torch.use_in_deepspeed()
