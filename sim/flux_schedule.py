"""Which Flux objects the Flux stand-in (sim/flux_standin.py) reconciles next.

Reconciling every object after every write made a test module with several CloudSpaces
starve the stand-in's event loop (a pass over each Kustomization of Flux's manifests reads
every object it installed), and the server's live calls to the host timed out. A
controller's outcome depends only on the objects it read, its own bookkeeping, the remotes
and switches a test sets, how kubeconfigs resolve, and time; so an object is reconciled
again only when one of those changes:

* the object itself is written or deleted;
* an object its last reconcile read (kube_api.READS records each `_find`, in any cluster)
  is written or deleted: a Secret wakes the Kustomizations and HelmReleases whose
  kubeConfig or valuesFrom named it, a source wakes what references it, a workload wakes
  the release or Kustomization waiting on it, a controller's Deployment in a vCluster
  wakes that vCluster's Flux objects;
* a CustomResourceDefinition changes in a cluster it read from (the kinds served change);
* how kubeconfigs resolve changes (a vCluster starts or stops, a listener is refused or
  opened, tokens expire): everything that resolved one;
* its own timer fires (a retry, a timeout);
* anything a test registers or switches (remotes, `unreachable`, `stall`, `fail`,
  `heal`): everything, as before.

Writes arriving while a pass runs are coalesced into the next one. `full` keeps the old
behaviour (every object after every change) for bench/host_standin.py's baseline.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any

ReadKey = tuple[Any, ...]  # (api, group, plural, namespace, name), as kube_api.READS holds
ObjKey = tuple[Hashable, str, str, str]  # (cluster, kind, namespace, name)
# What reading a kubeconfig's cluster depends on besides Secrets (running vClusters,
# listeners, tokens): one key for all of it.
RESOLVED: ReadKey = (None, "", "kubeconfigs", "", "")


class Schedule:
    """The dirty set of each cluster's Flux objects and the reads each reconcile made."""

    def __init__(self) -> None:
        self.full = False
        self._everything = False
        self._whole: set[Hashable] = set()  # clusters whose every object is due
        self._dirty: dict[Hashable, dict[str, set[tuple[str, str]]]] = {}
        self._reads: dict[ObjKey, frozenset[ReadKey]] = {}
        self._readers: dict[ReadKey, set[ObjKey]] = {}
        self._api_readers: dict[Any, set[ObjKey]] = {}

    # -- waking -------------------------------------------------------------------
    def wake_all(self) -> None:
        self._everything = True

    def wake_cluster(self, cluster: Hashable) -> None:
        self._whole.add(cluster)

    def wake(self, cluster: Hashable, kind: str, namespace: str, name: str) -> None:
        if self.full:
            self._everything = True
        else:
            self._dirty.setdefault(cluster, {}).setdefault(kind, set()).add((namespace, name))

    def wake_readers(self, read: ReadKey) -> None:
        """Everything whose last reconcile read this key."""
        for cluster, kind, namespace, name in list(self._readers.get(read, ())):
            self.wake(cluster, kind, namespace, name)

    def wake_api_readers(self, api: Any) -> None:
        """Everything whose last reconcile read anything in this cluster."""
        for cluster, kind, namespace, name in list(self._api_readers.get(api, ())):
            self.wake(cluster, kind, namespace, name)

    # -- a pass -----------------------------------------------------------------
    def pending(self) -> bool:
        return self._everything or bool(self._whole) or any(self._dirty.values())

    def begin(self) -> bool:
        """A pass starts: whether it visits everything (and the flag is cleared)."""
        everything, self._everything = self._everything, False
        return everything

    def whole(self, cluster: Hashable) -> bool:
        """Whether every object of this cluster is due (the flag is cleared)."""
        if cluster in self._whole:
            self._whole.discard(cluster)
            return True
        return False

    def take(
        self, cluster: Hashable, kind: str, every: bool, stored: Iterable[tuple[str, str]]
    ) -> list[tuple[str, str]]:
        """The objects of this kind and cluster due now, in name order; `stored` is every
        such object, all due when `every`."""
        names = self._dirty.get(cluster, {}).pop(kind, set())
        if every:
            names |= set(stored)
        return sorted(names)

    # -- what each reconcile read ---------------------------------------------------
    def record(self, key: ObjKey, reads: Iterable[ReadKey]) -> None:
        """What the object's latest reconcile read, replacing what the one before read."""
        new = frozenset(reads)
        old = self._reads.pop(key, frozenset())
        for read in old - new:
            self._unindex(self._readers, read, key)
        for api in {r[0] for r in old} - {r[0] for r in new}:
            self._unindex(self._api_readers, api, key)
        if not new:
            return
        self._reads[key] = new
        for read in new - old:
            self._readers.setdefault(read, set()).add(key)
        for api in {r[0] for r in new} - {r[0] for r in old}:
            self._api_readers.setdefault(api, set()).add(key)

    def forget(self, cluster: Hashable) -> None:
        """A cluster's Flux is gone (its vCluster stopped)."""
        for key in [k for k in self._reads if k[0] is cluster]:
            self.record(key, ())
        self._dirty.pop(cluster, None)
        self._whole.discard(cluster)

    @staticmethod
    def _unindex(index: dict[Any, set[ObjKey]], at: Any, key: ObjKey) -> None:
        found = index.get(at)
        if found is not None:
            found.discard(key)
            if not found:
                del index[at]
