"""Command-line interface. Only this package configures logging."""
