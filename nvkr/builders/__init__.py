"""Builders: the code that runs one kind of action, registered in one table.

The builder API (the :class:`~nvkr.builders.api.Builder` protocol, what it gets and returns, and
:func:`~nvkr.builders.api.get_builder`) is :mod:`nvkr.builders.api`; the one list of builders is
:data:`nvkr.builders.table.BUILDER_TABLE`; each builder is a package ``nvkr/builders/<name>/``.
This package imports nothing: every module below it runs it first, and the recipe's models import
the table's artifact models, so it must not reach the recipe.
"""
