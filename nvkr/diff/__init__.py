"""``nvkr diff``: what changed between two recipes, two lockfiles or two release sets
(:func:`nvkr.diff.compare.diff`).
"""
