"""pgrag's version (the wheel reads it from here: pyproject.toml's [tool.hatch.version])."""

__version__ = "0.2.0"
