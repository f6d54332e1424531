"""Fetching sources: from a recipe's pins to verified blobs in the store.

The entry points (``resolve`` at lock time, ``ensure`` at build time, the source table's lookup
``fetcher_for``) are :mod:`nvkr.fetch.api`; the one list of source kinds is
:data:`nvkr.fetch.table.SOURCE_TABLE`, each kind a :class:`~nvkr.fetch.kind.SourceKind`
(:mod:`nvkr.fetch.kinds`) whose fetching code is a module here (``http``, ``git``, ``pypi``,
``path``, ``oci``, ``apt``); :class:`~nvkr.fetch.context.FetchContext` is what every fetcher gets.
This package imports nothing: every module below it runs it first, and the recipe's models
import the table's source models, so it must not reach the recipe.
"""
