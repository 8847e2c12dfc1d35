"""Options renamed so that every command says one idea with one word (`--out` everywhere, ...).

The old spelling keeps working for one release: it is rewritten to the new one before click parses
the command line, with a one-line warning on stderr.
"""
from __future__ import annotations

import click


def renamed(old_to_new: dict[str, str], removed_in: str = "0.3"):
    """A click.Command class that accepts each old option name as its new one, with a warning."""

    class RenamedOptionsCommand(click.Command):
        def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
            rewritten = []
            for arg in args:
                name, sep, value = arg.partition("=")
                if name in old_to_new:
                    click.echo(f"warning: {name} is deprecated and will be removed in sage {removed_in}; "
                               f"use {old_to_new[name]}", err=True)
                    arg = old_to_new[name] + sep + value
                rewritten.append(arg)
                if arg == "--":
                    rewritten.extend(args[len(rewritten):])
                    break
            return super().parse_args(ctx, rewritten)

    return RenamedOptionsCommand
