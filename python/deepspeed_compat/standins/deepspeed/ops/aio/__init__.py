from ..op_builder import AsyncIOBuilder  # noqa: F401
