"""The one import of lupa in moonbox.

``import lupa`` may pick PUC Lua; the LuaJIT 2.1 module is imported by name.
"""

from lupa import luajit21 as lua

__all__ = ["lua"]
