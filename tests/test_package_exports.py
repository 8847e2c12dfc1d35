"""`import sage` is cheap and its lazy exports are findable: `dir(sage)` lists every name of
`sage.__all__` (PEP 562 `__dir__`), each resolves, and no `__future__` name leaks (issue 56 §5)."""
import subprocess
import sys


def test_dir_lists_every_lazy_export_and_each_resolves():
    import sage

    names = dir(sage)
    assert set(sage.__all__) <= set(names)
    assert "annotations" not in names  # `from __future__ import annotations` would leak it
    for name in sage.__all__:
        assert getattr(sage, name) is not None, name


def test_import_sage_loads_no_heavy_library():
    code = ("import sys, sage; dir(sage); "
            "print(sorted(m for m in ('torch', 'transformers', 'sentence_transformers', 'pandas') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
