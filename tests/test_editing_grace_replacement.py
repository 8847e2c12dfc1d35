"""GRACE's replacement rule (issue 32 §5): EasyEdit's `replace_last` (the default) replaces only
the key token's layer output, `from_key` everything from the key token on. Checked on the adapter's
hook with a real module."""
from __future__ import annotations

import pytest
import torch

from sage.editing.grace import GraceAdapter, GraceHParams
from sage.errors import SageInputError


@pytest.mark.parametrize("last_only, replaced", [(False, [2, 3, 4]), (True, [2])])
def test_a_hit_replaces_the_key_token_or_everything_after_it(last_only, replaced):
    module = torch.nn.Linear(4, 4)
    adapter = GraceAdapter(module, scan=False, last_only=last_only)
    try:
        key, value = torch.tensor([1.0, 0.0, 0.0, 0.0]), torch.full((4,), 7.0)
        adapter.keys, adapter.values, adapter.eps = [key], [value], [0.5]
        x = torch.zeros(2, 5, 4)
        x[0, 2] = key  # row 0: its key token (the prompt's last) is within the radius
        x[1, 2] = key + 2.0  # row 1: outside, deferred
        adapter.prompt_first, adapter.prompt_last = [0, 0], [2, 2]
        plain = torch.nn.functional.linear(x, module.weight, module.bias)
        out = module(x)
        changed = [p for p in range(5) if not torch.equal(out[0, p], plain[0, p])]
        assert changed == replaced and all(torch.equal(out[0, p], value) for p in replaced)
        assert torch.equal(out[1], plain[1]) and adapter.last_hits == [True, False]
    finally:
        adapter.remove()


def test_unknown_replacement_is_one_line():
    assert GraceHParams().replacement == "replace_last"  # the reference's rule is the default
    with pytest.raises(SageInputError, match="replacement must be one of"):
        GraceHParams(replacement="replace_all")
