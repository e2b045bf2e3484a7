"""Methods as plug-ins: each folder here is one method, whose `method.py` registers one `Method`
record of hooks.

Importing this package (or a folder of it) registers nothing and loads nothing heavy: a folder's
`__init__` is its docstring alone, so a light module of a folder (its settings, its checks) can
be read without torch or the other methods. `mmrlvr.methods.builtin` registers every built-in
method in the order the recipe calls their hooks; `METHODS` (and the lower layers' tables the
folders fill) import it on their first read. Adding a method is one new folder (its `method.py`
registers its record) imported there, plus its tests and docs page.
"""

from mmrlvr.methods.hooks import HOOKS, METHODS, Live, Method, active, register  # noqa: F401
