"""The ``note`` source kind (a text written in the recipe: ``{note: TEXT}``), a plug-in made by
tests/unit/fetch/test_source_plugin.py: ``model.py`` is its recipe model, ``entry.py`` its lock
entry's type, ``fetcher.py`` its SourceKind. ``copy_artifact.py`` and ``copy_builder.py`` are a
``copy-source`` builder that puts any source's blob in a file: the artifact the test builds from
a note."""
