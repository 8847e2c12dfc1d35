"""The package version (core: imported by the download client's User-Agent and the CLI)."""
__version__ = "0.1.0"
