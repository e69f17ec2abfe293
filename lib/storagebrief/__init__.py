"""storagebrief: measure how storage shapes AI pipelines and render a performance brief."""
__version__ = "0.1.0"
