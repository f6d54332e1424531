"""Helm charts without the ``helm`` binary: loading, metadata, packaging, checking.

The helm-chart builder (:mod:`nvkr.builders.helm_chart.builder`) composes these: :mod:`.ignore`
(``.helmignore`` rules), :mod:`.metadata` (Chart.yaml, Chart.lock, Helm's JSON and YAML forms,
``HashReq``), :mod:`.chart` (loading a directory or archive as Helm's loader does),
:mod:`.dependencies` (subcharts against Chart.lock), :mod:`.values` (image pins in values.yaml),
:mod:`.package` (the reproducible ``.tgz``, OCI tags) and :mod:`.check` (Helm's own lint and
render through helm-python-sdk).
"""
