"""The compatibility facts of one expanded variant: what the rules of ``recipes/compatibility.yaml``
are evaluated on (:mod:`nvkr.catalog.rules`).

After matrix expansion (:func:`nvkr.recipe.matrix.expand`) a variant is concrete; this module reads
from it, without fetching anything: its matrix cell (GPU generation, Kubernetes release line,
arch), the cluster version (``releaseSet.clusterRelease.kubernetes``), the component versions the
recipe declares in ``vars`` (``kubeletVersion``, ..., ``nvidiaDriverVersion``) and the containerd,
runc, NVIDIA driver and container toolkit and OVN versions pinned in its ``apt`` sources. Each
version is parsed with the parser of its kind (:mod:`nvkr.catalog.versions`): upstream SemVer,
NVIDIA driver, Debian package (reduced to its upstream version). A var and a pin of the same
component that disagree are recorded, not resolved: that is a violation of its own (rule
``pins.agree``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from nvkr.catalog.versions import (
    DriverVersion,
    UpstreamVersion,
    VersionError,
    parse_calendar,
    parse_debian,
    parse_driver,
    parse_upstream,
)
from nvkr.recipe.matrix import Variant
from nvkr.recipe.sources import AptSource
from nvkr.recipe.yamlsource import where

CLIENT_GO = "ovn-kubernetes-client-go"

# vars.NAME -> component. Every one is an upstream (SemVer) version except the driver.
VERSION_VARS: dict[str, str] = {
    "kubeletVersion": "kubelet",
    "kubeadmVersion": "kubeadm",
    "kubectlVersion": "kubectl",
    "crictlVersion": "crictl",
    "containerdVersion": "containerd",
    "runcVersion": "runc",
    "nvidiaDriverVersion": "nvidia-driver",
    "nvidiaContainerToolkitVersion": "nvidia-container-toolkit",
    # the SPIRE agent the node image stages, and the SPIRE server of the fleet it joins (a
    # fact of the fleet, not of the image: a layer of the user's sets it)
    "spireVersion": "spire-agent",
    "spireServerVersion": "spire-server",
    # the k8s.io/client-go OVN-Kubernetes' pinned go.mod requires (v0.X.Y, Kubernetes 1.X.Y's
    # client libraries), read as the Kubernetes release it was made for
    "ovnKubernetesClientGo": CLIENT_GO,
}
DRIVER = "nvidia-driver"
OVN = "ovn"
# components versioned YY.MM.PATCH (OVN's releases), parsed with parse_calendar
CALENDAR: frozenset[str] = frozenset({OVN})
COMPONENTS: tuple[str, ...] = (*VERSION_VARS.values(), OVN)

# NVIDIA's packaging (driver installation guide, "Kernel Modules"): nvidia-open installs the open
# kernel modules, cuda-drivers the proprietary ones; Debian's own packages are
# nvidia-open-kernel-dkms and nvidia-kernel-dkms (and nvidia-tesla-NNN-kernel-dkms for an older
# branch kept beside the current one).
_OPEN_PREFIXES = ("nvidia-open", "nvidia-kernel-open")
_PROPRIETARY_PREFIXES = ("cuda-drivers", "nvidia-kernel-dkms")


@dataclass(frozen=True)
class Fact:
    """One component version of a variant.

    Attributes:
        version: the parsed version (:class:`~nvkr.catalog.versions.DriverVersion` for the NVIDIA driver,
            else :class:`~nvkr.catalog.versions.UpstreamVersion`).
        text: the string as written (a Debian version for an apt pin).
        where: ``FILE:LINE: vars.kubeletVersion`` or ``FILE:LINE: sources.S.packages.P``.
    """

    version: UpstreamVersion | DriverVersion
    text: str
    where: str


@dataclass(frozen=True)
class Disagreement:
    """A version var and an apt pin of the same component naming different versions."""

    component: str
    var: Fact
    pin: Fact


@dataclass(frozen=True)
class SchemaFile:
    """The OVSDB schema one file names (rule check ``ovsdb-schema``).

    Attributes:
        database: the schema's ``name``, e.g. ``OVN_Northbound``.
        version: its ``version`` (x.y.z, parsed as SemVer); ``text`` as written.
        where: the file and the source it was read from, with where the pin is written.
    """

    database: str
    version: UpstreamVersion
    text: str
    where: str


@dataclass(frozen=True)
class RuleSchemas:
    """What one ``ovsdb-schema`` rule read of a variant's locked sources
    (:mod:`nvkr.catalog.schemas`).

    Attributes:
        models: the schemas the client's models were generated from.
        servers: the schemas the server package ships.
        unread: what could not be read, each said in full (a violation: the rules fail closed).
        has_models, has_server: whether the variant has such sources at all.
    """

    models: tuple[SchemaFile, ...] = ()
    servers: tuple[SchemaFile, ...] = ()
    unread: tuple[str, ...] = ()
    has_models: bool = False
    has_server: bool = False


@dataclass(frozen=True)
class VariantFacts:
    """The facts of one variant that compatibility rules read.

    Attributes:
        file: the recipe, for messages (as the user named it).
        variant: ``gpu=...,kubernetes=...,arch=...``.
        gpu, kubernetes, arch: the matrix cell (``kubernetes`` is a release line such as ``1.36``).
        cluster: ``releaseSet.clusterRelease.kubernetes`` parsed, or None without a cluster release.
        components: component name (:data:`COMPONENTS`) -> its version; from the var when there
            is one, else from the first apt pin.
        kernel_modules: the NVIDIA kernel module flavours the apt pins install: ``open``,
            ``proprietary`` (both when both are pinned), empty when unknown.
        proprietary_pins: where the pins of the proprietary flavour are written
            (``FILE:LINE: sources.S.packages.P``).
        disagreements: var/pin pairs (and pin/pin pairs) naming different versions.
        schemas: per ``ovsdb-schema`` rule id, what it read of the locked sources' bytes; None
            when no source was read (``validate``).
    """

    file: str
    variant: str
    gpu: str
    kubernetes: str
    arch: str
    cluster: Fact | None = None
    components: dict[str, Fact] = field(default_factory=dict)
    kernel_modules: frozenset[str] = frozenset()
    proprietary_pins: tuple[str, ...] = ()
    disagreements: tuple[Disagreement, ...] = ()
    schemas: dict[str, RuleSchemas] | None = None


def pinned_component(package: str) -> str | None:
    """The component an apt package pin stages: ``containerd`` (``containerd``,
    ``containerd.io``), ``runc``, ``nvidia-container-toolkit``, the NVIDIA driver
    (``nvidia-driver``, ``cuda-drivers``, ``nvidia-open``, and the kernel modules alone:
    ``nvidia-kernel``, each alone or followed by ``-...``, as Debian and NVIDIA package them;
    Debian's ``nvidia-tesla-NNN-...`` read without ``tesla-NNN-``), OVN (``ovn-host``,
    ``ovn-central``, ``ovn-common``: the node's ovn-controller and the databases an image
    carries, all of one release), else None."""
    if package in ("containerd", "containerd.io"):
        return "containerd"
    if package == "runc":
        return "runc"
    if package == "nvidia-container-toolkit":
        return "nvidia-container-toolkit"
    if _named(package, ("nvidia-driver", "cuda-drivers", "nvidia-open", "nvidia-kernel")):
        return DRIVER
    if package in ("ovn-host", "ovn-central", "ovn-common"):
        return OVN
    return None


def kernel_module_flavour(package: str) -> str | None:
    """``open``, ``proprietary`` or None for an apt package name (see the module constants)."""
    if _named(package, _OPEN_PREFIXES):
        return "open"
    if _named(package, _PROPRIETARY_PREFIXES):
        return "proprietary"
    return None


def _named(package: str, prefixes: tuple[str, ...]) -> bool:
    """Whether ``package`` is one of ``prefixes`` or starts with one and a ``-`` (``nvidia-open``,
    ``nvidia-open-580``, not ``nvidia-opencl-icd``), Debian's versioned names read without their
    ``tesla-NNN-`` (``nvidia-tesla-535-kernel-dkms`` is ``nvidia-kernel-dkms``)."""
    name = re.sub(r"^nvidia-tesla-[0-9]+-", "nvidia-", package)
    return any(name == p or name.startswith(p + "-") for p in prefixes)


def variant_facts(variant: Variant, file: str | Path) -> VariantFacts:
    """Read the facts of ``variant`` (of the recipe ``file``).

    Returns:
        The :class:`VariantFacts`; components the recipe does not declare are absent.
    Raises:
        VersionError: a version var, the cluster version or a pin that does not parse as its kind,
            naming ``FILE:LINE: vars.NAME`` (or the field) and the expected form.
    """
    recipe = variant.recipe
    locations = variant.locations
    cluster: Fact | None = None
    if recipe.releaseSet.clusterRelease is not None:
        text = recipe.releaseSet.clusterRelease.kubernetes
        place = where(locations, ("releaseSet", "clusterRelease", "kubernetes"))
        cluster = Fact(parse_upstream(text, where=place), text, place)

    from_vars: dict[str, Fact] = {}
    for name, component in VERSION_VARS.items():
        value = recipe.vars.get(name)
        if value is None:
            continue
        place = where(locations, ("vars", name))
        from_vars[component] = Fact(_parse(component, value, place), value, place)

    pins: dict[str, list[Fact]] = {}
    flavours: set[str] = set()
    proprietary: list[str] = []
    for source_name, source in sorted(recipe.sources.items()):
        if not isinstance(source, AptSource):
            continue
        for package, pinned in sorted(source.packages.items()):
            flavour = kernel_module_flavour(package)
            if flavour is not None:
                flavours.add(flavour)
            if flavour == "proprietary":
                proprietary.append(where(locations, ("sources", source_name, "packages", package)))
            staged = pinned_component(package)
            if staged is None:
                continue
            place = where(locations, ("sources", source_name, "packages", package))
            pins.setdefault(staged, []).append(
                Fact(_parse_pin(staged, pinned, place), pinned, place)
            )

    components = dict(from_vars)
    disagreements: list[Disagreement] = []
    for component, found in pins.items():
        reference = from_vars.get(component, found[0])
        components.setdefault(component, reference)
        disagreements.extend(
            Disagreement(component, reference, pin)
            for pin in found
            if pin is not reference and pin.version != reference.version
        )
    return VariantFacts(
        file=str(file),
        variant=variant.id,
        gpu=variant.gpu,
        kubernetes=variant.kubernetes,
        arch=variant.arch,
        cluster=cluster,
        components=components,
        kernel_modules=frozenset(flavours),
        proprietary_pins=tuple(proprietary),
        disagreements=tuple(disagreements),
    )


def _parse(component: str, text: str, place: str) -> UpstreamVersion | DriverVersion:
    if component == DRIVER:
        return parse_driver(text, where=place)
    if component == CLIENT_GO:
        return client_go_release(text, where=place)
    if component in CALENDAR:
        return parse_calendar(text, where=place)
    return parse_upstream(text, where=place)


def client_go_release(text: str, *, where: str) -> UpstreamVersion:
    """The Kubernetes release a k8s.io/client-go version belongs to: ``v0.34.1`` -> ``1.34.1``
    (client-go's tags are v0.X.Y for Kubernetes 1.X.Y since Kubernetes 1.17).

    Raises:
        VersionError: not ``[v]0.X.Y``.
    """
    bare = text.removeprefix("v")
    if not re.fullmatch(r"0\.\d+\.\d+", bare):
        raise VersionError(
            text,
            "is not a k8s.io/client-go version: expected v0.X.Y (Kubernetes 1.X.Y's client "
            "libraries), e.g. v0.34.1",
            where=where,
        )
    return parse_upstream("1." + bare[2:], where=where)


def _parse_pin(component: str, text: str, place: str) -> UpstreamVersion | DriverVersion:
    """A pinned Debian version as the component's upstream version: SemVer for containerd and
    runc (``1.6.20~ds1-1+deb12u3`` -> ``1.6.20``), the driver version for NVIDIA driver packages
    (``580.95.05-1`` -> ``580.95.05``)."""
    debian = parse_debian(text, where=place)
    if component == DRIVER:
        return parse_driver(debian.upstream, where=f"{place}: {text!r}: upstream part")
    if component in CALENDAR:
        return parse_calendar(debian.upstream, where=f"{place}: {text!r}: upstream part")
    return debian.upstream_semver(where=place)
