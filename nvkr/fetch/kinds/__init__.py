"""The built-in source kinds, one module each: its :class:`~nvkr.fetch.kind.SourceKind`, named
by its line of :mod:`nvkr.fetch.table`. A kind's module is light: the fetching code
(``nvkr/fetch/<module>.py``) is imported when a source of the kind is resolved or ensured.
This package imports nothing.
"""
