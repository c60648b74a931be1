"""Stand-in for the parts of DeepSpeed that its aio tests and ds_io import, so that DeepSpeed's
own test files and tools run unmodified against nvmeio_torch (python/deepspeed_compat/README.md).
The real subpackages deepspeed.nvme and deepspeed.io are copied in beside these by run.sh."""

from . import ops  # noqa: F401
