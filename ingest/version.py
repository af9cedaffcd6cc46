"""The package version, in a leaf module so that reports and tools can name it without
importing the whole package."""
__version__ = "0.1.0"
