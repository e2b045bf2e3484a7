"""The rollout server's end of the weight channel, inside vLLM's workers (`worker_extension_cls`).

vLLM mixes this class into its worker, and `LLM.collective_rpc(name, args)` calls its methods on
every worker where the model lives: in the server's process when vLLM runs in-process, in the
engine's worker processes otherwise (the GPU default; one per tensor-parallel shard). So the
broadcast lands straight on each device that holds a shard, as TRL's `WeightSyncWorkerExtension`
and verl's rollout workers receive theirs, and is loaded through the worker's own `reload_weights`
(which re-runs the loader's post-processing, as `VLLMRolloutEngine.load_pairs` does; given whole
tensors, vLLM's parallel layers' weight loaders cut out the worker's shard). Method names carry
an `mmrlvr_` prefix so they cannot shadow the worker's own.

The group: 1 trainer + every worker of every data-parallel replica. Worker `offset + rank` (the
replica's first worker index plus vLLM's rank of the worker in its replica) is group rank 1 +
that index; worker 0 hosts the store and publishes the group's size and bucket size in it.
"""

from __future__ import annotations

from mmrlvr.rollout import weight_channel


class WeightChannelExtension:
    """Hosts the channel's store (worker 0), joins the group, receives and loads a broadcast."""

    def _mmrlvr_index(self, offset: int) -> int:
        return int(offset) + int(getattr(self, "rank", 0))

    def mmrlvr_channel_store(self, host: str, timeout_s: float, workers: int = 1, offset: int = 0,
                             bucket_bytes: int = weight_channel.BUCKET_BYTES) -> int | None:
        """Worker 0: host the rendezvous store on a free port of `host` and publish the group's size
        (1 + `workers`); returns the port for the client (None on every other worker)."""
        self._mmrlvr_close()
        if self._mmrlvr_index(offset) != 0:
            return None
        self._mmrlvr_store = weight_channel.host_store(host, timeout_s)
        if workers != 1 or bucket_bytes != weight_channel.BUCKET_BYTES:
            weight_channel.publish(self._mmrlvr_store, 1 + int(workers), bucket_bytes)
        return int(self._mmrlvr_store.port)

    def mmrlvr_channel_join(self, backend: str, timeout_s: float, host: str, port: int | None = None,
                            offset: int = 0) -> None:
        """Join the group as rank 1 + this worker's index (blocks until every member joins)."""
        index = self._mmrlvr_index(offset)
        store = getattr(self, "_mmrlvr_store", None)
        if store is None and index != 0 and port is not None:
            store = weight_channel.join_store(host, port, timeout_s)
            self._mmrlvr_store = store
        if store is None:
            raise ValueError("no weight channel is open: POST /weight_channel first")
        self._mmrlvr_group = weight_channel.open_group(store, weight_channel.SERVER_RANK + index, backend,
                                                       timeout_s, host)

    def mmrlvr_channel_receive(self, spec: list) -> int:
        """Receive the tensors `spec` names and load them as they arrive; returns how many were loaded.

        The received tensors stream into the loader: one bucket in memory at a time, never a
        second full copy of the model."""
        group = getattr(self, "_mmrlvr_group", None)
        if group is None:
            raise ValueError("the weight channel is not joined: POST /weight_channel/join first")
        device = getattr(self, "device", "cpu")
        count = [0]

        def pairs():
            for pair in weight_channel.receive(group, spec, device=device):
                count[0] += 1
                yield pair
        try:
            self.reload_weights(weights_iterator=pairs())
        except Exception:
            self._mmrlvr_close()  # a broken broadcast leaves the group unusable: the client reopens it
            raise
        return count[0]

    def _mmrlvr_close(self) -> None:
        group = getattr(self, "_mmrlvr_group", None)
        if group is not None and hasattr(group, "abort"):
            try:
                group.abort()
            except Exception:  # noqa: BLE001 - best effort: the group is dropped either way
                pass
        self._mmrlvr_group = None
        self._mmrlvr_store = None
