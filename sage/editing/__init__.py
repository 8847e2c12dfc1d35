"""CounterMoral knowledge editing: loader, editors (one module each, one registry), metrics, runner.

Importing this package is light; method modules load when `EDITORS.get(name)` first asks for them.
"""
from sage.editing.editor_base import EDITORS, EditContext, HParams, make_editor

__all__ = ["EDITORS", "EditContext", "HParams", "make_editor"]
