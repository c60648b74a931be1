"""deepspeed.ops: which ops can be built here. async_io counts as usable once
nvmeio_torch.use_in_deepspeed() (or DS_AIO_EXTENSION, see op_builder) provides it."""

__compatible_ops__ = {"async_io": False, "pin_memory": False}
