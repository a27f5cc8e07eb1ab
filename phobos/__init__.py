# Phobos: a tiny tile kernel language that compiles straight to PTX.
#
# The public surface is gathered here; each name lives in the module of its
# stage (see docs/architecture.md for the pipeline).
__version__ = "0.1.0"

from .errors import PhobosError  # noqa: E402

__all__ = ["PhobosError", "__version__"]
