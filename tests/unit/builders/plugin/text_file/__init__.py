"""The ``text-file`` builder: a plug-in made by tests/unit/builders/test_builder_plugin.py."""
