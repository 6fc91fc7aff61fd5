"""The environment a mod sees is exactly the allowlist plus the host functions."""

from __future__ import annotations

import moonbox
from moonbox import Sandbox
from moonbox.sandbox import ALLOWED_GLOBALS, ALLOWED_LIBRARIES, DENIED

LIST_GLOBALS = """
local names = {}
for k, v in pairs(_G) do
  if type(v) == "table" and k ~= "_G" then
    for f in pairs(v) do names[#names + 1] = k .. "." .. f end
  else
    names[#names + 1] = k
  end
end
table.sort(names)
return names
"""


def test_environment_is_exactly_the_allowlist(jit):
    with Sandbox(jit=jit, host_functions=moonbox.default_bindings()) as sb:
        names = set(sb.run(LIST_GLOBALS).value)
    expected = set(ALLOWED_GLOBALS) | {"_G", "report", "add"}
    for lib, fields in ALLOWED_LIBRARIES.items():
        expected |= {f"{lib}.{f}" for f in fields}
    assert names == expected


def test_print_needs_the_report_binding():
    with Sandbox() as sb:
        assert sb.run("return print").value is None


def test_allowlist_and_denylist_do_not_overlap_and_give_reasons():
    allowed = (
        set(ALLOWED_GLOBALS)
        | {f"{lib}.{f}" for lib, fs in ALLOWED_LIBRARIES.items() for f in fs}
        | set(ALLOWED_LIBRARIES)
    )
    assert not allowed & set(DENIED)
    assert all(reason.strip() for reason in [*ALLOWED_GLOBALS.values(), *DENIED.values()])


def test_a_host_function_cannot_shadow_a_standard_global():
    class Fake:
        name = "pcall"
        cost = 1

        def __call__(self, call, args):
            return ()

    import pytest

    with pytest.raises(moonbox.ConfigError):
        Sandbox(host_functions=[Fake()])
