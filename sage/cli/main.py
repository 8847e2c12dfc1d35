"""`sage` console script: a click group whose subcommands live in sibling modules.

Subcommand modules import only click at module level; heavy libraries load inside commands.
Every `SageInputError` becomes one line on stderr and exit status 2, with no traceback; Ctrl-C during
generation (`sage.errors.Interrupted`) one `interrupted:` line saying what was kept, and status 130.
"""
from __future__ import annotations

import importlib
import logging
import os
import sys

import click

from sage.errors import Interrupted, SageInputError
from sage.version import __version__

# command name -> module defining `command`; modules are imported only when needed.
COMMANDS = {
    "score": "sage.cli.score",
    "generate": "sage.cli.generate",
    "edit": "sage.cli.edit",
    "annotate": "sage.cli.annotate",
    "correlate": "sage.cli.correlate",
    "report": "sage.cli.report",
    "study": "sage.cli.study",
    "data": "sage.cli.data",
}


class _SageGroup(click.Group):
    def list_commands(self, ctx):
        return sorted(COMMANDS)

    def get_command(self, ctx, name):
        if name not in COMMANDS:
            return None
        return importlib.import_module(COMMANDS[name]).command

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except SageInputError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(2)
        except Interrupted as exc:  # Ctrl-C after the finished work was kept: what was kept, how to resume
            click.echo(f"interrupted: {exc}", err=True)
            ctx.exit(exc.exit_code)

    def main(self, args=None, prog_name=None, **extra):
        """Click's own usage errors (a bad option value, a file option given a directory, an unknown
        option) become one `error:` line and exit status 2, like every other bad input."""
        extra.pop("standalone_mode", None)
        try:
            code = super().main(args=args, prog_name=prog_name, standalone_mode=False, **extra)
        except click.UsageError as exc:
            where = f"; see '{exc.ctx.command_path} --help'" if exc.ctx is not None else ""
            click.echo(f"error: {exc.format_message().rstrip('.')}{where}", err=True)
            sys.exit(2)
        except click.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        except click.ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)
        sys.exit(code if isinstance(code, int) else 0)


@click.group(cls=_SageGroup)
@click.version_option(__version__, prog_name="sage")
@click.option("-v", "--verbose", count=True,
              help="More log output: -v info lines (and the libraries' model-loading bars), -vv debug.")
@click.option("-q", "--quiet", is_flag=True, help="Only warnings and errors.")
@click.option("--offline", is_flag=True,
              help="No model or dataset downloads (same as HF_HUB_OFFLINE=1); OpenAI-compatible endpoints named "
                   "with --base-url are still called.")
def cli(verbose: int, quiet: bool, offline: bool) -> None:
    """SaGE: semantic-graph consistency of language models on moral questions, and moral editing."""
    if offline:  # before any command imports huggingface_hub, which reads its flag at import
        os.environ["SAGE_OFFLINE"] = "1"
        os.environ["HF_HUB_OFFLINE"] = "1"
    # A command prints its results, progress bars and warnings; -v adds sage's info lines.
    level = logging.WARNING if quiet or not verbose else (logging.DEBUG if verbose > 1 else logging.INFO)
    os.environ["SAGE_VERBOSE"] = str(0 if quiet else verbose)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    for noisy in ("httpx", "httpx2", "urllib3", "filelock", "huggingface_hub", "sentence_transformers"):
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING))
    # bitsandbytes (pulled in beside peft) warns at import about optional CPU kernels sage never uses
    logging.getLogger("bitsandbytes").setLevel(logging.ERROR if not verbose else level)
    # vLLM sets up its own log handler when imported, from this variable (its engine processes inherit it);
    # its per-step INFO lines are kept for -v.
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "INFO" if verbose else "WARNING")


def main(argv: list[str] | None = None) -> None:
    cli.main(args=argv, prog_name="sage")


if __name__ == "__main__":
    main()
