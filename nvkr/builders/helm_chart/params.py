"""The ``helm-chart`` action's params, typed: what :meth:`HelmChartBuilder.plan` fixes and
:meth:`HelmChartBuilder.run` reads.

Their JSON (:meth:`HelmChartParams.to_json`) enters the action key: ``appVersion`` and
``subdir`` are there as null when unset, ``check`` is absent (not null) without one, as they
always were.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class _Params(BaseModel):
    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")


class ImagePin(_Params):
    """Where an image goes in values.yaml: its ``repository`` and the ``index`` action key
    whose result's ``indexDigest`` pins it."""

    repository: str
    index: str
    tag: str | None = None


class ImageDigest(_Params):
    """An image the recipe pins by digest (one nvkr does not build): its ``repository`` and
    ``digest`` go into values.yaml as they are."""

    repository: str
    digest: str
    tag: str | None = None


class CheckParams(_Params):
    """The namespace and values ``helm lint`` and ``helm template`` check the chart with."""

    namespace: str
    values: dict[str, Any]


class HelmChartParams(_Params):
    """The chart ``version`` and ``appVersion`` the recipe sets, the chart's ``subdir`` in its
    source, the ``images`` pinned by values key (an image-index action, or a recipe's digest),
    the recipe's ``values`` and the ``check``."""

    version: str
    appVersion: str | None
    subdir: str | None
    images: dict[str, ImagePin | ImageDigest]
    valuesFile: str | None = None
    values: dict[str, str | bool | int] = {}
    check: CheckParams | None = None

    def to_json(self) -> dict[str, Any]:
        """The params as the action holds them (``valuesFile``, ``values`` and ``check`` only
        when set, so the charts without them keep their keys)."""
        unset = {"check"} if self.check is None else set()
        unset |= {"valuesFile"} if self.valuesFile is None else set()
        out = self.model_dump(exclude=unset | ({"values"} if not self.values else set()))
        for image in out["images"].values():
            if image["tag"] is None:  # a digest pin keeps the key it always had
                del image["tag"]
        return out
