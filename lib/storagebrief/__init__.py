"""storagebrief: measure how storage shapes AI pipelines and render a performance brief."""
__version__ = "0.1.0"

# The registry registers every study's params section with core.config (core never imports studies).
from . import studies  # noqa: E402,F401
