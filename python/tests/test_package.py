"""The package's shape: every public name documented, named by ``uform`` as users import it, and no
``__del__`` anywhere (handles are released by ``weakref.finalize``; see test_lifetime.py)."""

from __future__ import annotations

import ctypes
import dataclasses
import inspect
import os
import pkgutil
import unittest

import uform
import uform.models


def public_members(cls):
    """(name, function or property) of what ``cls`` itself defines for users."""
    for name, member in vars(cls).items():
        if name.startswith("_") and name not in ("__init__", "__call__"):
            continue
        if isinstance(member, (staticmethod, classmethod)):
            member = member.__func__
        if name == "__init__" and dataclasses.is_dataclass(cls):
            continue  # generated from the documented fields
        if isinstance(member, property) or inspect.isfunction(member):
            yield name, member


class Package(unittest.TestCase):
    def public(self):
        values = {}
        for module in (uform, uform.models):
            for name in module.__all__ if module is uform else dir(module):
                value = getattr(module, name)
                if name.startswith("_") or not (inspect.isclass(value) or inspect.isfunction(value)):
                    continue
                if not value.__module__.startswith("uform"):
                    continue  # imported helpers (dataclass, Optional, ...)
                if inspect.isclass(value) and issubclass(value, ctypes.Structure):
                    continue  # the C layouts: documented by the header they restate
                values[f"{module.__name__}.{name}"] = value
        return values

    def test_every_public_class_and_function_has_a_docstring(self):
        undocumented = []
        for qualified, value in self.public().items():
            if not (value.__doc__ or "").strip():
                undocumented.append(qualified)
            if inspect.isclass(value):
                for name, member in public_members(value):
                    if not (member.__doc__ or "").strip():
                        undocumented.append(f"{qualified}.{name}")
        self.assertEqual(undocumented, [])

    def test_public_classes_are_named_by_the_package(self):
        for name in uform.__all__:
            value = getattr(uform, name)
            if inspect.isclass(value):
                self.assertIn(value.__module__, ("uform", "uform._codes", "uform.models"), name)

    def test_no_finalizer_runs_in_del(self):
        for info in pkgutil.iter_modules(uform.__path__):
            module = __import__(f"uform.{info.name}", fromlist=["_"])
            for name, value in vars(module).items():
                if inspect.isclass(value) and value.__module__ == module.__name__:
                    self.assertNotIn("__del__", vars(value), f"uform.{info.name}.{name}")

    def test_modules_stay_small(self):
        directory = os.path.dirname(uform.__file__)
        for name in sorted(os.listdir(directory)):
            if name.endswith(".py"):
                with open(os.path.join(directory, name), encoding="utf-8") as file:
                    lines = sum(1 for _ in file)
                self.assertLessEqual(lines, 500, f"uform/{name} has {lines} lines: split it by concept")


if __name__ == "__main__":
    unittest.main()
