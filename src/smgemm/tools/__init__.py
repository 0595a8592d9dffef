"""Commands built on the library: `python -m smgemm bench | bench overlap | bench tp | tune` (`cli.py`).

Nothing in the library imports this package; its timing and table helpers (`timing.py`) are public for scripts.
"""
