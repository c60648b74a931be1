"""deepspeed.accelerator: the CPU accelerator, as DeepSpeed picks it on a machine without a GPU."""

import torch


class _CPU_Accelerator:
    def device_name(self, device_index=None):
        return "cpu"

    def is_available(self):
        return False

    def device_count(self):
        return 1

    def pin_memory(self, tensor, align_bytes=1):
        return tensor  # CPU tensors need no pinning on a machine without a GPU

    def ByteTensor(self, *args, **kwargs):
        return torch.ByteTensor(*args, **kwargs)

    def get_op_builder(self, class_name):
        from deepspeed.ops import op_builder
        return getattr(op_builder, class_name, None)


_accelerator = _CPU_Accelerator()


def get_accelerator():
    return _accelerator
