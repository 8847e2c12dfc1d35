"""Option parsing helpers shared by subcommands."""
from __future__ import annotations

import click


def csv_list(value: str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    items = tuple(v.strip() for v in value.split(",") if v.strip())
    if not items:
        raise click.BadParameter("expected a comma-separated list")
    return items
