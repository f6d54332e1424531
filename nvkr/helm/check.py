"""Checking a packaged chart with Helm itself: ``helm lint --strict`` and ``helm template``.

The helm-chart builder runs both on the archive it wrote, through helm-python-sdk (Helm v4 as a
library, no ``helm`` binary): a chart nvkr publishes loads, lints clean with warnings treated as
errors, and renders as a user installs it: in the namespace and with the values the recipe's
``check`` gives (default: namespace ``default``, the chart's own values). Helm's messages name the
file and line (``node-agent/templates/daemonset.yaml:12:3``); they become one BuildError.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nvkr.errors import BuildError, ToolError

# helm lint severities (pkg/chart/v2/lint/support): 1 info, 2 warning, 3 error
_WARNING = 2


def _helm() -> Any:
    try:
        import helm_python
    except ImportError:
        raise ToolError(
            "the helm-chart builder checks charts with Helm, but helm-python-sdk is not installed",
            hint="pip install helm-python-sdk (it embeds Helm v4; no helm binary is needed)",
        ) from None
    return helm_python


def helm_check(
    archive: Path,
    *,
    where: str,
    release: str,
    namespace: str = "default",
    values: dict[str, Any] | None = None,
) -> tuple[list[str], dict[str, str]]:
    """Lint (strict) and render ``archive`` as release ``release`` in ``namespace``, with
    ``values`` over the chart's own (``helm lint --strict`` and ``helm template --namespace NS
    -f values``); return log lines (Helm's version, info findings, rendered files) and the
    rendered files (``{"<chart>/templates/x.yaml": text}``).

    Raises:
        BuildError: a lint warning or error, or a template that does not render (Helm's text,
            which names the file and line).
        ToolError: helm-python-sdk is missing.
    """
    helm = _helm()
    given = "the recipe's check values" if values else "the chart's default values"
    log = [
        f"helm {helm.helm_sdk_version()} (helm-python-sdk {helm.__version__})",
        f"check: release {release}, namespace {namespace}, {given}",
    ]
    try:
        report = helm.lint(str(archive), values or None, strict=True, namespace=namespace)
    except helm.HelmError as e:
        raise BuildError(f"{where}: helm lint could not read the chart: {e.detail}") from None
    problems = [m for m in report.get("messages", []) if int(m.get("severity", 0)) >= _WARNING]
    texts = [f"{m.get('path', '')}: {m.get('error', '')}" for m in problems]
    texts += [e for e in report.get("errors", []) if not any(e in t for t in texts)]
    if texts:
        raise BuildError(
            f"{where}: helm lint --strict failed:\n  " + "\n  ".join(texts),
            hint="fix the chart; `helm lint --strict` on the chart directory shows the same",
        )
    log += [
        f"lint info: {m.get('path', '')}: {m.get('error', '')}" for m in report.get("messages", [])
    ]
    try:
        with helm.Chart.load(str(archive)) as chart:
            rendered = chart.render(
                values or None, name=release, namespace=namespace, is_install=True
            )
    except helm.HelmError as e:
        raise BuildError(
            f"{where}: helm template failed in namespace {namespace!r} with {given}:\n  {e.detail}",
            hint="every template must render with values.yaml alone, or with what the recipe "
            "gives the check: check: {namespace: NAME, values: {...}} on the helm-chart artifact "
            "(charts that refuse the default namespace or need a value)",
        ) from None
    log += [f"rendered {name} ({len(text)} bytes)" for name, text in sorted(rendered.items())]
    return log, dict(rendered)
