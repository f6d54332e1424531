"""The ``image-index`` builder."""
