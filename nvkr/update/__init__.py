"""``nvkr lock --update``: move pins to what their upstreams publish now, then lock again.

Issue 7, item 4. Before the lock in the data flow: for each pinned source the recipe's location
map (:mod:`nvkr.recipe.yamlsource`) says where its version is written — a ``vars`` string the
source's URL is templated from (possibly in a layer the recipe extends, or in an overlay), a
pypi ``version``, an apt ``packages`` entry — and its upstream (:mod:`nvkr.update.upstreams`)
says which versions exist. :func:`plan_update` picks the target of every pin (newest release in
the pin's own ``MAJOR.MINOR`` line for SemVer upstreams, newest package for apt; never a
pre-release without ``pre``; exactly ``to`` when given), computes every edit (the version; a
pypi wheel's ``sha256`` and ``member``; a url source's inline ``sha256``/``sha512`` from the
checksum file published next to the new URL) and loads the edited recipe from memory. The caller
locks that recipe and only then writes the files (:func:`write_atomically`): a failure anywhere
leaves every file as it was.

The request and the pins are :mod:`nvkr.update.pins`', the targets and edits
:mod:`nvkr.update.targets`', the plan :mod:`nvkr.update.planner`'s; what each source kind adds is
its hook's (:mod:`nvkr.update.hooks`, named by the kind's
:class:`~nvkr.fetch.kind.SourceKind`; the built-in kinds' are :mod:`nvkr.update.kinds`). Versions are ordered only by
:mod:`nvkr.catalog.versions` and :mod:`nvkr.catalog.constraints`.
"""

from nvkr.update.pins import Change, UpdatePlan, UpdateRequest
from nvkr.update.planner import plan_update, write_atomically

__all__ = ["Change", "UpdatePlan", "UpdateRequest", "plan_update", "write_atomically"]
