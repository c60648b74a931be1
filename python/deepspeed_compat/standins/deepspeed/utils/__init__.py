"""deepspeed.utils: the logger DeepSpeed's own handle warns through."""

import logging

logger = logging.getLogger("DeepSpeed")
